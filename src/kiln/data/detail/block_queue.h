#pragma once
// The bounded, ordered queue between two pipeline stages (internal).
//
// Rows move in blocks, so one lock hand-off serves many rows. Every block carries a sequence
// number; consumers take blocks strictly in sequence order, whatever order parallel producers
// finish them in. A producer holding sequence `s` waits only while `s` is `capacity` or more ahead
// of the consumer, which bounds memory and cannot deadlock: the producer holding the consumer's
// next block never waits.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "kiln/data/source.h"

namespace kiln::data::detail {

struct Block {
  std::vector<Row> rows;
  int64_t first_row = 0;   // position of rows[0] in the stream since the pipeline started
  bool epoch_end = false;  // marks the end of an epoch (carries no rows)
  // A batch stage's block: the batch it becomes, counted in its epoch, and the epoch (from 0).
  int64_t batch_num = 0, epoch_num = 0;
};

class BlockQueue {
 public:
  explicit BlockQueue(int capacity) : slots_(size_t(capacity < 1 ? 1 : capacity)) {}

  int capacity() const { return int(slots_.size()); }

  // Stores block `seq`; waits while it is too far ahead. False when the pipeline was aborted.
  bool push(int64_t seq, Block&& block) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t cap = int64_t(slots_.size());
    if (seq >= head_ + cap) {
      ++push_waiters_;
      not_full_.wait(lock, [&] { return aborted_ || seq < head_ + cap; });
      --push_waiters_;
    }
    if (aborted_) return false;
    slots_[size_t(seq % cap)] = std::move(block);
    ++occupied_;
    if (seq == head_ && pop_waiters_ > 0) not_empty_.notify_all();
    return true;
  }

  // Takes the next block in sequence order. False at the end of the stream or on abort.
  // `on_wait`, when set, is called every `poll` while waiting (without the lock); an exception
  // from it leaves the queue as it was and propagates.
  bool pop(Block& out, int64_t* seq = nullptr, const std::function<void()>& on_wait = {},
           std::chrono::milliseconds poll = std::chrono::milliseconds(100)) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t cap = int64_t(slots_.size());
    auto ready = [&] {
      return aborted_ || head_ >= end_ || slots_[size_t(head_ % cap)].has_value();
    };
    while (!ready()) {
      ++pop_waiters_;
      if (on_wait) {
        bool woke = not_empty_.wait_for(lock, poll, ready);
        --pop_waiters_;
        if (woke) break;
        lock.unlock();
        on_wait();
        lock.lock();
      } else {
        not_empty_.wait(lock, ready);
        --pop_waiters_;
      }
    }
    if (aborted_ || head_ >= end_) return false;
    auto& slot = slots_[size_t(head_ % cap)];
    out = std::move(*slot);
    slot.reset();
    --occupied_;
    if (seq) *seq = head_;
    ++head_;
    // Producers waiting for room are woken once the queue is half empty, not at every block
    // taken: they then fill half the queue per wake. A training step that takes one batch from
    // a full queue otherwise paid a wake-up (a futex call, and a switch on a busy core) per batch.
    if (push_waiters_ > 0 && 2 * occupied_ <= cap) not_full_.notify_all();
    // Several consumers (parallel workers) may wait for consecutive blocks.
    if (pop_waiters_ > 0 && slots_[size_t(head_ % cap)].has_value()) not_empty_.notify_one();
    return true;
  }

  // No block at or after `end_seq` will be pushed; consumers finish once they reach it.
  void close(int64_t end_seq) {
    std::lock_guard<std::mutex> lock(mu_);
    if (end_seq < end_) end_ = end_seq;
    not_empty_.notify_all();
  }

  // Wakes every waiter; all later pushes and pops fail.
  void abort() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  // The sequence number the stream ends at (valid once pop() returned false without abort).
  int64_t end_seq() {
    std::lock_guard<std::mutex> lock(mu_);
    return end_;
  }
  bool aborted() {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }

  // Blocks waiting to be consumed (for diagnostics).
  int64_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t n = 0;
    for (auto& s : slots_) n += s.has_value();
    return n;
  }

 private:
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::vector<std::optional<Block>> slots_;
  int64_t head_ = 0;
  int64_t end_ = std::numeric_limits<int64_t>::max();
  bool aborted_ = false;
  int push_waiters_ = 0, pop_waiters_ = 0;
  int64_t occupied_ = 0;  // blocks stored and not yet taken
};

}  // namespace kiln::data::detail
