#include "kiln/core/allocator.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln {
namespace allocator {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t(2) << 20;

struct Cache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  MemoryStats stats;
  int64_t cache_limit = int64_t(8) << 30;
};

Cache& cache() {
  // Never destroyed: tensors held by static objects may be released after main() returns.
  static Cache* c = new Cache;
  return *c;
}

// Under an address-space limit (ulimit -v), whatever allocation reaches the limit fails. A
// tensor's failure is reported cleanly, but oneDNN generates its kernels' code when a primitive is
// made or first run and dies (SIGSEGV) when that allocation fails. So a tensor is allocated only if
// this much address space stays free after it, for the libraries' code, scratch and thread stacks.
constexpr size_t kLibraryHeadroom = size_t(64) << 20;

bool leaves_library_headroom() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return true;
  // Address space, not memory, is what the limit counts, so reserving it is the exact test.
  void* probe = mmap(nullptr, kLibraryHeadroom, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (probe == MAP_FAILED) return false;
  munmap(probe, kLibraryHeadroom);
  return true;
}

// A block of `bytes` (a size class) for a first request of `requested` bytes, or null. Huge
// pages back only the whole 2 MiB pages of the request: the kernel would back a partly used last
// one in full (a 3.1 MiB tensor would hold 4 MiB), while 4 KiB pages are resident only where
// touched.
void* os_allocate(size_t bytes, size_t requested) {
  size_t align = bytes >= kHugePage ? kHugePage : kAlignment;
  void* p = std::aligned_alloc(align, bytes);
  if (!p) return nullptr;
  if (!leaves_library_headroom()) {
    std::free(p);
    return nullptr;
  }
  const size_t huge = requested / kHugePage * kHugePage;
  if (huge > 0) madvise(p, huge, MADV_HUGEPAGE);
  return p;
}

constinit std::atomic<AllocationObserver> g_observer{nullptr};

}  // namespace

size_t size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= 1024) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  // Eight classes per power of two: at most 12.5% slack, and shapes that differ a little
  // (the last batch of an epoch) still reuse the same blocks.
  size_t top = std::bit_floor(bytes);
  size_t step = top / 8;
  size_t rounded = (bytes + step - 1) / step * step;
  if (rounded >= kHugePage) rounded = (rounded + kHugePage - 1) / kHugePage * kHugePage;
  return rounded;
}

void* allocate(size_t bytes) {
  size_t cls = size_class(bytes);
  Cache& c = cache();
  void* reused = nullptr;
  int64_t in_use = 0;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats.in_use_bytes += int64_t(cls);
    in_use = c.stats.in_use_bytes;
    if (c.stats.in_use_bytes > c.stats.peak_bytes) c.stats.peak_bytes = c.stats.in_use_bytes;
    auto it = c.free_lists.find(cls);
    if (it != c.free_lists.end() && !it->second.empty()) {
      reused = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= int64_t(cls);
    } else {
      ++c.stats.os_allocations;
    }
  }
  void* p = reused ? reused : os_allocate(cls, bytes);
  if (!p) {
    // Blocks cached in other size classes may be what stands in the way: give them back and
    // try once more before failing.
    empty_cache();
    p = os_allocate(cls, bytes);
  }
  if (!p) {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats.in_use_bytes -= int64_t(cls);
    throw std::bad_alloc();
  }
  if (AllocationObserver observer = g_observer.load(std::memory_order_acquire)) {
    observer(int64_t(cls), in_use);
  }
  return p;
}

void release(void* ptr, size_t bytes) {
  if (!ptr) return;
  size_t cls = size_class(bytes);
  Cache& c = cache();
  int64_t in_use = 0;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats.in_use_bytes -= int64_t(cls);
    in_use = c.stats.in_use_bytes;
    if (c.stats.cached_bytes + int64_t(cls) > c.cache_limit) {
      std::free(ptr);
    } else {
      c.free_lists[cls].push_back(ptr);
      c.stats.cached_bytes += int64_t(cls);
    }
  }
  if (AllocationObserver observer = g_observer.load(std::memory_order_acquire)) {
    observer(-int64_t(cls), in_use);
  }
}

MemoryStats stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void reset_peak() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.peak_bytes = c.stats.in_use_bytes;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [cls, list] : c.free_lists) {
    for (void* p : list) std::free(p);
    list.clear();
  }
  c.stats.cached_bytes = 0;
}

void set_allocation_observer(AllocationObserver observer) {
  g_observer.store(observer, std::memory_order_release);
}

void set_cache_limit(int64_t bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.cache_limit = bytes;
}

}  // namespace allocator

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;
}

int64_t available_memory_bytes() {
  int64_t available = -1;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    int64_t kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    int64_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;  // the address space in use, in pages
    const int64_t left = int64_t(limit.rlim_cur) - pages * int64_t(sysconf(_SC_PAGESIZE));
    available = available < 0 ? std::max<int64_t>(left, 0) : std::min(available, left);
  }
  return available;
}

}  // namespace kiln
