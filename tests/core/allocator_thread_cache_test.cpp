// The allocator's per-thread caches (core/allocator.cpp): a thread gets back the blocks it
// freed, each thread's cache is bounded and given back when the thread ends, and empty_cache()
// empties every thread's. Plain threads, so that the ThreadSanitizer stage runs these too.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/core/allocator.h"

namespace kiln::allocator_thread_cache_test {
namespace {

// Sizes no other test of this binary uses, so the shared lists hold none of them at the start.
constexpr size_t kBytes = 777777;
constexpr size_t kOtherBytes = 555555;

TEST(AllocatorThreadCache, AThreadGetsBackTheBlockItFreedAndNoOtherThreadDoes) {
  std::mutex mu;
  std::condition_variable cv;
  int stage = 0;  // 1: the owner freed its block; 2: this thread took one of its own
  auto wait_for = [&](int s) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return stage >= s; });
  };
  auto go_to = [&](int s) {
    std::lock_guard<std::mutex> lock(mu);
    stage = s;
    cv.notify_all();
  };
  void* owners = nullptr;
  std::thread owner([&] {
    owners = allocator::allocate(kBytes);
    allocator::release(owners, kBytes);
    go_to(1);
    wait_for(2);
    const int64_t fetched = allocator::stats().os_allocations;
    void* again = allocator::allocate(kBytes);
    EXPECT_EQ(again, owners);
    EXPECT_EQ(allocator::stats().os_allocations, fetched);
    allocator::release(again, kBytes);
  });
  wait_for(1);
  void* mine = allocator::allocate(kBytes);
  EXPECT_NE(mine, owners) << "another thread's freed block, likely still in that core's cache";
  go_to(2);
  owner.join();
  allocator::release(mine, kBytes);
}

TEST(AllocatorThreadCache, AnEndingThreadsBlocksGoToTheOthers) {
  void* freed = nullptr;
  std::thread([&] {
    freed = allocator::allocate(kOtherBytes);
    allocator::release(freed, kOtherBytes);
  }).join();
  const int64_t fetched = allocator::stats().os_allocations;
  void* p = allocator::allocate(kOtherBytes);
  EXPECT_EQ(p, freed);
  EXPECT_EQ(allocator::stats().os_allocations, fetched);
  allocator::release(p, kOtherBytes);
}

TEST(AllocatorThreadCache, EachSizeKeepsAFewBlocksAndTheRestAreShared) {
  constexpr size_t kBlocks = 20;
  constexpr size_t kSize = 333333;
  std::mutex mu;
  std::condition_variable cv;
  bool freed = false, done = false;
  std::thread owner([&] {
    std::vector<void*> blocks;
    for (size_t i = 0; i < kBlocks; ++i) blocks.push_back(allocator::allocate(kSize));
    for (void* b : blocks) allocator::release(b, kSize);
    std::unique_lock<std::mutex> lock(mu);
    freed = true;
    cv.notify_all();
    cv.wait(lock, [&] { return done; });  // alive: its cache keeps what it kept
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return freed; });
  }
  // The owner keeps at most 8; the other 12 or more reach this thread without the OS.
  const int64_t fetched = allocator::stats().os_allocations;
  std::vector<void*> mine;
  for (size_t i = 0; i < 12; ++i) mine.push_back(allocator::allocate(kSize));
  EXPECT_EQ(allocator::stats().os_allocations, fetched);
  // empty_cache() empties the living owner's cache too: nothing of this size is left anywhere.
  for (void* b : mine) allocator::release(b, kSize);
  allocator::empty_cache();
  EXPECT_EQ(allocator::stats().cached_bytes, 0);
  void* fresh = allocator::allocate(kSize);
  EXPECT_EQ(allocator::stats().os_allocations, fetched + 1);
  allocator::release(fresh, kSize);
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  owner.join();
}

TEST(AllocatorThreadCache, StatsAddUpAcrossThreads) {
  const MemoryStats before = allocator::stats();
  auto churn = [] {
    for (int i = 0; i < 2000; ++i) {
      const size_t bytes = 1000 + size_t(i % 7) * 5000;
      void* p = allocator::allocate(bytes);
      allocator::release(p, bytes);
    }
  };
  std::thread a(churn), b(churn);
  a.join();
  b.join();
  const MemoryStats after = allocator::stats();
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  EXPECT_GE(after.peak_bytes, before.in_use_bytes);
  allocator::empty_cache();
  EXPECT_EQ(allocator::stats().cached_bytes, 0);
}

}  // namespace
}  // namespace kiln::allocator_thread_cache_test
