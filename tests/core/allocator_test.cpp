#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
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

}  // namespace
}  // namespace kiln::allocator_test
