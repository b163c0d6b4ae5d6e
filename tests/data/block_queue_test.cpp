// The queue between pipeline stages: blocks come out in sequence order whatever order parallel
// producers push them in, and a producer waiting for room is always woken in the end (producers
// are woken when the queue is half empty, not at every block taken).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "kiln/data/detail/block_queue.h"

namespace kiln::data::block_queue_test {
namespace {

using detail::Block;
using detail::BlockQueue;

Block block_numbered(int64_t n) {
  Block b;
  b.first_row = n;
  return b;
}

// `producers` threads push blocks 0..blocks-1 (producer p the blocks p, p + producers, ...);
// the consumer takes them all, slowly at first so the queue fills and the producers wait.
// Returns the first_row of every block taken, in the order taken.
std::vector<int64_t> run(BlockQueue& queue, int producers, int64_t blocks) {
  const int capacity = queue.capacity();
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&queue, p, producers, blocks] {
      for (int64_t seq = p; seq < blocks; seq += producers) queue.push(seq, block_numbered(seq));
    });
  }
  std::vector<int64_t> taken;
  Block b;
  for (int64_t i = 0; i < blocks; ++i) {
    if (i < 2 * capacity) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (!queue.pop(b)) break;
    taken.push_back(b.first_row);
  }
  queue.close(blocks);
  for (std::thread& t : threads) t.join();
  return taken;
}

TEST(BlockQueue, EveryCapacityDeliversEveryBlockInOrderWithWaitingProducers) {
  for (int capacity : {1, 2, 3, 4, 7, 16}) {
    for (int producers : {1, 3}) {
      // A lost wake-up would leave a producer waiting and the consumer with it: bound the run,
      // and abort the queue to end it.
      BlockQueue queue(capacity);
      auto result = std::async(std::launch::async, run, std::ref(queue), producers, int64_t(200));
      const bool finished = result.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
      if (!finished) queue.abort();
      const std::vector<int64_t> taken = result.get();
      ASSERT_TRUE(finished) << "capacity " << capacity << ", " << producers
                            << " producers: the queue hung";
      ASSERT_EQ(taken.size(), 200u) << "capacity " << capacity << ", " << producers;
      for (int64_t i = 0; i < 200; ++i) {
        ASSERT_EQ(taken[size_t(i)], i) << "capacity " << capacity << ", " << producers;
      }
    }
  }
}

TEST(BlockQueue, AProducerWaitingOnAFullQueueRunsOnceHalfOfItIsTaken) {
  BlockQueue queue(4);
  for (int64_t seq = 0; seq < 4; ++seq) ASSERT_TRUE(queue.push(seq, block_numbered(seq)));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    queue.push(4, block_numbered(4));
    pushed = true;
  });
  // Time for the producer to find the queue full and wait (were it late, it would find room and
  // the test would pass without testing the wake-up; it cannot fail for that reason).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Block b;
  ASSERT_TRUE(queue.pop(b));
  ASSERT_TRUE(queue.pop(b));  // two of four left: half empty
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pushed && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(pushed) << "the producer still waits with half the queue free";
  queue.abort();
  producer.join();
}

}  // namespace
}  // namespace kiln::data::block_queue_test
