#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "kiln/core/allocator.h"
#include "kiln/core/tensor.h"

namespace kiln::allocator_test {
namespace {

TEST(Allocator, SizeClassesCoverRequestsWithBoundedSlack) {
  for (size_t b : {size_t(1), size_t(63), size_t(1000), size_t(4097), size_t(1) << 20,
                   (size_t(3) << 20) + 5}) {
    size_t c = allocator::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_EQ(c % 64, 0u);
    if (b > 1024 && b < (size_t(2) << 20)) {
      EXPECT_LE(c, b + b / 8 + 64);
    }
  }
  EXPECT_EQ(allocator::size_class((size_t(3) << 20) + 5) % (size_t(2) << 20), 0u);
}

TEST(Allocator, FreedBlocksAreReusedNotRefetched) {
  const size_t bytes = 123456;
  void* p = allocator::allocate(bytes);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  allocator::release(p, bytes);
  MemoryStats before = allocator::stats();
  void* q = allocator::allocate(bytes);
  MemoryStats after = allocator::stats();
  EXPECT_EQ(q, p) << "the cached block comes back";
  EXPECT_EQ(after.os_allocations, before.os_allocations);
  EXPECT_EQ(after.cached_bytes, before.cached_bytes - int64_t(allocator::size_class(bytes)));
  allocator::release(q, bytes);
}

// A block larger than its request (a size class, rounded to huge pages) holds huge pages only
// over the request's whole 2 MiB pages: with a huge page under the last, partly used one, the
// untouched rest of it would be resident too. Where the kernel gives no huge pages, nothing
// past the touched bytes is resident either way.
TEST(Allocator, UntouchedTailOfALargeBlockStaysOutOfMemory) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t bytes = (size_t(3) << 20) + 4096;  // class: 4 MiB
  ASSERT_GE(allocator::size_class(bytes), size_t(4) << 20);
  auto* p = static_cast<unsigned char*>(allocator::allocate(bytes));
  std::memset(p, 1, bytes);
  const size_t touched = (bytes + page - 1) / page * page, end = size_t(4) << 20;
  std::vector<unsigned char> resident((end - touched) / page);
  ASSERT_EQ(mincore(p + touched, end - touched, resident.data()), 0);
  size_t count = 0;
  for (unsigned char r : resident) count += r & 1;
  EXPECT_EQ(count, 0u) << "pages past the request are resident";
  allocator::release(p, bytes);
}

TEST(Allocator, StatsTrackInUseAndPeak) {
  allocator::reset_peak();
  MemoryStats s0 = allocator::stats();
  {
    Tensor t = Tensor::empty({1 << 16});  // 256 KiB
    MemoryStats s1 = allocator::stats();
    EXPECT_EQ(s1.in_use_bytes - s0.in_use_bytes, int64_t(allocator::size_class(1 << 18)));
    EXPECT_GE(s1.peak_bytes, s1.in_use_bytes);
  }
  MemoryStats s2 = allocator::stats();
  EXPECT_EQ(s2.in_use_bytes, s0.in_use_bytes);
  EXPECT_GE(s2.peak_bytes, s0.in_use_bytes + (1 << 18));
  allocator::reset_peak();
  EXPECT_EQ(allocator::stats().peak_bytes, s2.in_use_bytes);
}

TEST(Allocator, RepeatedTensorsOfOneShapeHitTheCache) {
  { Tensor warm = Tensor::empty({3, 1000, 100}); }
  int64_t before = allocator::stats().os_allocations;
  for (int i = 0; i < 20; ++i) Tensor t = Tensor::empty({3, 1000, 100});
  EXPECT_EQ(allocator::stats().os_allocations, before);
}

// The process's address space in bytes (VmSize), as RLIMIT_AS counts it.
size_t address_space_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  size_t kib = 0;
  while (status >> key) {
    if (key == "VmSize:") {
      status >> kib;
      break;
    }
  }
  return kib << 10;
}

// Lowers the soft address-space limit to `room` bytes above what the process holds now, and puts
// the old limit back at the end of the scope.
class ScopedAddressSpaceLimit {
 public:
  explicit ScopedAddressSpaceLimit(size_t room) {
    getrlimit(RLIMIT_AS, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = address_space_bytes() + room;
    ok_ = setrlimit(RLIMIT_AS, &lowered) == 0;
  }
  ~ScopedAddressSpaceLimit() { setrlimit(RLIMIT_AS, &saved_); }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  bool ok_ = false;
};

// Blocks of 40 MiB: above glibc's largest mmap threshold, so each is its own mapping and freeing
// it gives its address space back.
constexpr size_t kBigBlock = size_t(40) << 20;

std::vector<void*> allocate_until_refused(size_t bytes) {
  std::vector<void*> blocks;
  try {
    for (int i = 0; i < 1000; ++i) blocks.push_back(allocator::allocate(bytes));
  } catch (const std::bad_alloc&) {
  }
  return blocks;
}

// oneDNN dies by a signal when it cannot allocate the code of a kernel it generates, so under
// `ulimit -v` the limit has to land on a tensor, which fails cleanly.
TEST(Allocator, UnderAnAddressSpaceLimitTensorsLeaveRoomForTheLibraries) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's own allocator ends the process at an address-space limit";
#endif
  allocator::empty_cache();
  const int64_t in_use_before = allocator::stats().in_use_bytes;
  std::vector<void*> blocks;
  bool room_left = false;
  {
    ScopedAddressSpaceLimit limit(size_t(400) << 20);
    ASSERT_TRUE(limit.ok());
    blocks = allocate_until_refused(kBigBlock);
    void* library =
        mmap(nullptr, size_t(48) << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    room_left = library != MAP_FAILED;
    if (room_left) munmap(library, size_t(48) << 20);
    for (void* p : blocks) allocator::release(p, kBigBlock);
  }
  allocator::empty_cache();
  EXPECT_GE(blocks.size(), 5u) << "the limit left 400 MiB, 64 MiB of it for the libraries";
  EXPECT_LT(blocks.size(), 1000u) << "the limit refused nothing";
  EXPECT_TRUE(room_left) << "the tensors took the address space a library would need next";
  EXPECT_EQ(allocator::stats().in_use_bytes, in_use_before) << "a refused request stays counted";
}

TEST(Allocator, CachedBlocksGoBackToTheOSBeforeARequestIsRefused) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's own allocator ends the process at an address-space limit";
#endif
  allocator::empty_cache();
  void* bigger = nullptr;
  size_t cached = 0;
  {
    ScopedAddressSpaceLimit limit(size_t(300) << 20);
    ASSERT_TRUE(limit.ok());
    std::vector<void*> blocks = allocate_until_refused(kBigBlock);
    ASSERT_GE(blocks.size(), 2u);
    for (void* p : blocks) allocator::release(p, kBigBlock);
    cached = size_t(allocator::stats().cached_bytes);
    // Only the cached blocks' address space can hold a block twice their size.
    try {
      bigger = allocator::allocate(2 * kBigBlock);
    } catch (const std::bad_alloc&) {
    }
  }
  EXPECT_GE(cached, 2 * kBigBlock);
  EXPECT_NE(bigger, nullptr) << "the cache kept the space a new size needed";
  if (bigger) allocator::release(bigger, 2 * kBigBlock);
  allocator::empty_cache();
}

TEST(Allocator, EmptyCacheAndLimit) {
  { Tensor t = Tensor::empty({1 << 15}); }
  allocator::empty_cache();
  EXPECT_EQ(allocator::stats().cached_bytes, 0);
  allocator::set_cache_limit(0);
  { Tensor t = Tensor::empty({1 << 15}); }
  EXPECT_EQ(allocator::stats().cached_bytes, 0) << "over the limit, blocks go back to the OS";
  allocator::set_cache_limit(int64_t(8) << 30);
  EXPECT_GT(peak_rss_mb(), 0.0);
}

TEST(Allocator, AvailableMemoryIsTheSystemsAndWhatALimitLeaves) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's shadow memory takes the address space a limit would leave";
#endif
  const int64_t system = available_memory_bytes();
  EXPECT_GT(system, int64_t(1) << 20) << "MemAvailable is read from /proc/meminfo";
  ScopedAddressSpaceLimit limit(size_t(100) << 20);
  ASSERT_TRUE(limit.ok());
  const int64_t limited = available_memory_bytes();
  EXPECT_GT(limited, 0);
  EXPECT_LE(limited, int64_t(100) << 20) << "under a limit, at most what is left below it";
}

}  // namespace
}  // namespace kiln::allocator_test
