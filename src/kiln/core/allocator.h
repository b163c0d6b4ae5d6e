#pragma once
#include <cstddef>
#include <cstdint>

namespace kiln {

struct MemoryStats {
  int64_t in_use_bytes = 0;    // handed out to tensors now
  int64_t peak_bytes = 0;      // highest in_use_bytes since the last reset_peak()
  int64_t cached_bytes = 0;    // freed by tensors, kept for reuse
  int64_t os_allocations = 0;  // blocks obtained from the OS (a cache miss each)
};

// The process-wide caching allocator. Freed blocks are kept in size-class free lists and reused
// instead of going back to the OS: on the machines we measure, faulting a 4 KiB page in costs
// ~15 µs, so a training step that re-faulted its activations every step would lose half its time.
// Blocks are 64-byte aligned; blocks of 2 MiB and more are 2 MiB aligned and advised as huge pages.
// A request the OS refuses first gives the cache back and tries again; then it throws
// std::bad_alloc. Under an address-space limit (ulimit -v) a request is refused when it would
// leave less than 64 MiB below the limit: that room is for the libraries (allocator.cpp says why).
namespace allocator {

void* allocate(size_t bytes);
void release(void* ptr, size_t bytes);
// Size actually reserved for a request (the size class); release() takes the requested size.
size_t size_class(size_t bytes);
MemoryStats stats();
void reset_peak();
// Returns every cached block to the OS.
void empty_cache();
// Cached bytes above this limit go back to the OS on release (default 8 GiB).
void set_cache_limit(int64_t bytes);

// Told every allocate (bytes > 0) and release (bytes < 0) of a block, its size class, with the
// bytes in use right after it; called on the allocating thread, outside the allocator's lock
// (the profiler). With none set an allocation reads one atomic pointer more. Null removes it.
using AllocationObserver = void (*)(int64_t bytes, int64_t in_use_bytes);
void set_allocation_observer(AllocationObserver observer);

}  // namespace allocator

// Peak resident set size of the process, in MiB (from getrusage).
double peak_rss_mb();

// Bytes the process could still get: the system's MemAvailable (/proc/meminfo), and under an
// address-space limit (ulimit -v) at most what is left below it. -1 where neither is known.
int64_t available_memory_bytes();

}  // namespace kiln
