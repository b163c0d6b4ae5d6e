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

struct ThreadCache;

// The statistics are atomics: the threads' own caches (below) update them without the lock.
struct Cache {
  std::mutex mutex;  // free_lists, thread_caches
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  std::vector<ThreadCache*> thread_caches;
  std::atomic<int64_t> in_use_bytes{0}, peak_bytes{0}, cached_bytes{0}, os_allocations{0};
  std::atomic<int64_t> cache_limit{int64_t(8) << 30};
};

Cache& cache() {
  // Never destroyed: tensors held by static objects may be released after main() returns.
  static Cache* c = new Cache;
  return *c;
}

// Counts `cls` bytes in use; returns the bytes in use after it.
int64_t count_in_use(Cache& c, int64_t cls) {
  const int64_t in_use = c.in_use_bytes.fetch_add(cls, std::memory_order_relaxed) + cls;
  int64_t peak = c.peak_bytes.load(std::memory_order_relaxed);
  while (in_use > peak && !c.peak_bytes.compare_exchange_weak(peak, in_use)) {
  }
  return in_use;
}

// Each thread keeps a few freed blocks of each size for itself. A thread then gets back the
// blocks it freed, still in its own core's cache, and takes no lock another thread holds: eager
// LeNet's two batch slices, each allocating every op's output, trained 15% faster so than on the
// shared lists alone. Bounded per size and in all; blocks over kThreadBlockBytes go to the shared
// lists, where any thread finds them.
constexpr size_t kThreadBlocksPerSize = 8;
constexpr size_t kThreadBlockBytes = size_t(4) << 20;
constexpr int64_t kThreadCacheBytes = int64_t(32) << 20;

struct ThreadCache {
  std::mutex mutex;  // this thread's, and empty_cache()'s from any thread: never contended long
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  int64_t bytes = 0;

  ThreadCache();
  ~ThreadCache();
  // Moves every block to the shared lists (`c.mutex` held).
  void give_back(Cache& c);
};

// Set once this thread's cache is gone (thread exit): later releases on this thread (a static
// object's tensors) use the shared lists. Trivially destructible, so readable until the end.
thread_local bool t_cache_gone = false;

ThreadCache* thread_cache() {
  if (t_cache_gone) return nullptr;
  thread_local ThreadCache tc;
  return &tc;
}

ThreadCache::ThreadCache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.thread_caches.push_back(this);
}

ThreadCache::~ThreadCache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  give_back(c);
  std::erase(c.thread_caches, this);
  t_cache_gone = true;
}

void ThreadCache::give_back(Cache& c) {
  std::lock_guard<std::mutex> lock(mutex);
  for (auto& [cls, list] : free_lists) {
    auto& shared = c.free_lists[cls];
    shared.insert(shared.end(), list.begin(), list.end());
    list.clear();
  }
  bytes = 0;
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
  if (ThreadCache* tc = thread_cache()) {
    std::lock_guard<std::mutex> lock(tc->mutex);
    auto it = tc->free_lists.find(cls);
    if (it != tc->free_lists.end() && !it->second.empty()) {
      reused = it->second.back();
      it->second.pop_back();
      tc->bytes -= int64_t(cls);
    }
  }
  if (!reused) {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free_lists.find(cls);
    if (it != c.free_lists.end() && !it->second.empty()) {
      reused = it->second.back();
      it->second.pop_back();
    }
  }
  if (reused) {
    c.cached_bytes.fetch_sub(int64_t(cls), std::memory_order_relaxed);
  } else {
    c.os_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  const int64_t in_use = count_in_use(c, int64_t(cls));
  void* p = reused ? reused : os_allocate(cls, bytes);
  if (!p) {
    // Blocks cached in other size classes may be what stands in the way: give them back and
    // try once more before failing.
    empty_cache();
    p = os_allocate(cls, bytes);
  }
  if (!p) {
    c.in_use_bytes.fetch_sub(int64_t(cls), std::memory_order_relaxed);
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
  const int64_t in_use =
      c.in_use_bytes.fetch_sub(int64_t(cls), std::memory_order_relaxed) - int64_t(cls);
  bool kept = false;
  if (ThreadCache* tc = thread_cache(); tc != nullptr && cls <= kThreadBlockBytes) {
    std::lock_guard<std::mutex> lock(tc->mutex);
    auto& list = tc->free_lists[cls];
    if (list.size() < kThreadBlocksPerSize && tc->bytes + int64_t(cls) <= kThreadCacheBytes &&
        c.cached_bytes.load(std::memory_order_relaxed) + int64_t(cls) <= c.cache_limit.load()) {
      list.push_back(ptr);
      tc->bytes += int64_t(cls);
      c.cached_bytes.fetch_add(int64_t(cls), std::memory_order_relaxed);
      kept = true;
    }
  }
  if (!kept) {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.cached_bytes.load(std::memory_order_relaxed) + int64_t(cls) > c.cache_limit.load()) {
      std::free(ptr);
    } else {
      c.free_lists[cls].push_back(ptr);
      c.cached_bytes.fetch_add(int64_t(cls), std::memory_order_relaxed);
    }
  }
  if (AllocationObserver observer = g_observer.load(std::memory_order_acquire)) {
    observer(-int64_t(cls), in_use);
  }
}

MemoryStats stats() {
  const Cache& c = cache();
  return {.in_use_bytes = c.in_use_bytes.load(),
          .peak_bytes = c.peak_bytes.load(),
          .cached_bytes = c.cached_bytes.load(),
          .os_allocations = c.os_allocations.load()};
}

void reset_peak() {
  Cache& c = cache();
  c.peak_bytes.store(c.in_use_bytes.load());
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (ThreadCache* tc : c.thread_caches) tc->give_back(c);
  for (auto& [cls, list] : c.free_lists) {
    for (void* p : list) std::free(p);
    c.cached_bytes.fetch_sub(int64_t(cls) * int64_t(list.size()), std::memory_order_relaxed);
    list.clear();
  }
}

void set_allocation_observer(AllocationObserver observer) {
  g_observer.store(observer, std::memory_order_release);
}

void set_cache_limit(int64_t bytes) {
  cache().cache_limit.store(bytes);
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
