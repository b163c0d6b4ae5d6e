#include "kiln/core/thread_group.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <string>

#include "kiln/core/error.h"

namespace kiln {
namespace {

thread_local const ThreadGroup::Member* current_member = nullptr;

// Members run on their own cores and meet a few dozen times a step, microseconds apart: a short
// spin catches the last arrival without a system call, and a futex wait takes over (libstdc++'s
// atomic wait) where a member is descheduled or slow.
constexpr int kSpins = 4000;

}  // namespace

ThreadGroup::ThreadGroup(int size) : size_(size), meetings_(size_t(std::max(size, 0))) {
  if (size < 1)
    throw Error("ThreadGroup: a group needs at least one member, got " + std::to_string(size));
  for (auto& c : contributions_) c.resize(size_t(size));
}

std::vector<double> ThreadGroup::all_gather(int member, std::span<const double> mine) {
  if (member < 0 || member >= size_) {
    throw Error("ThreadGroup: member " + std::to_string(member) + " of a group of " +
                std::to_string(size_));
  }
  const size_t m = size_t(member);
  const int parity = int(meetings_[m]++ % 2);
  contributions_[parity][m].assign(mine.begin(), mine.end());
  wait_for_everyone();
  std::vector<double> out;
  out.reserve(mine.size() * size_t(size_));
  for (const std::vector<double>& c : contributions_[parity]) {
    if (c.size() != mine.size()) {
      abort();
      throw Error("ThreadGroup: members met with " + std::to_string(mine.size()) + " and " +
                  std::to_string(c.size()) + " values: they run different computations");
    }
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

void ThreadGroup::wait_for_everyone() {
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  auto check = [&] {
    if (aborted_.load(std::memory_order_acquire)) {
      throw Error("ThreadGroup: another member of the group failed");
    }
  };
  check();
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == size_) {
    arrived_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    return;
  }
  for (int spin = 0; generation_.load(std::memory_order_acquire) == generation; ++spin) {
    check();
    if (spin < kSpins) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    } else {
      generation_.wait(generation, std::memory_order_acquire);
    }
  }
  check();
}

void ThreadGroup::abort() {
  aborted_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
}

void ThreadGroup::reset() {
  aborted_.store(false, std::memory_order_relaxed);
  arrived_.store(0, std::memory_order_relaxed);
  std::fill(meetings_.begin(), meetings_.end(), 0);
}

ThreadGroup::Member::Member(ThreadGroup& group, int index)
    : group_(group), index_(index), previous_(current_member) {
  if (index < 0 || index >= group.size()) {
    throw Error("ThreadGroup: member " + std::to_string(index) + " of a group of " +
                std::to_string(group.size()));
  }
  current_member = this;
}

ThreadGroup::Member::~Member() {
  current_member = previous_;
}

const ThreadGroup::Member* ThreadGroup::Member::current() {
  return current_member;
}

}  // namespace kiln
