#pragma once
// Threads of one process that run copies of one computation side by side, each on its own part
// of the data, and meet inside kernels to combine what each computed: the slices of a
// batch-split training step (train/batch_split_step.h), whose BatchNorm kernels normalize with
// the statistics of the whole batch.
//
// all_gather is the one kind of meeting: every member contributes a vector and gets back all of
// them in member order, so each member combines them in the same order and gets the same bits.
// A member that fails calls abort(), which makes every meeting, waiting or to come, throw
// instead of waiting forever for it; reset() readies the group for the next run.
//
// A kernel finds its group through ThreadGroup::Member::current(), the calling thread's
// membership, set for the scope of one slice's run: a kernel's signature has no room for it and
// its attributes are plain values. The op's attributes say that it must meet
// (BatchNormAttrs::batch_slices), and the kernel checks that its thread is in a group that size.
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

namespace kiln {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size);
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int size() const { return size_; }

  // Member `member` contributes `mine`; returns, once every member has contributed, all the
  // contributions one after another in member order (size() × mine.size() values). The members
  // must meet in the same sequence, each time with the same number of values. Throws
  // kiln::Error once the group is aborted.
  std::vector<double> all_gather(int member, std::span<const double> mine);

  // A member failed: every meeting waiting now or called later throws.
  void abort();
  // Clears an abort; only while no member is inside a meeting.
  void reset();

  // The calling thread is member `index` of `group` for this object's scope.
  class Member {
   public:
    Member(ThreadGroup& group, int index);
    ~Member();
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

    // The calling thread's membership; null outside any.
    static const Member* current();

    ThreadGroup& group() const { return group_; }
    int index() const { return index_; }
    std::vector<double> all_gather(std::span<const double> mine) const {
      return group_.all_gather(index_, mine);
    }

   private:
    ThreadGroup& group_;
    int index_;
    const Member* previous_;
  };

 private:
  void wait_for_everyone();

  int size_;
  // Meetings alternate between two sets of contributions, so that a member already writing the
  // next meeting's never overwrites one that a slower member is still reading: it cannot get
  // two meetings ahead, since the one between waits for the slow member.
  std::vector<std::vector<double>> contributions_[2];
  std::vector<uint64_t> meetings_;  // per member: meetings it has been to
  std::atomic<int> arrived_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> aborted_{false};
};

}  // namespace kiln
