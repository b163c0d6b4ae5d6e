// ThreadGroup (core/thread_group.h): every member gets every contribution in member order at
// each meeting, however the members' timing falls; a failed member's abort() frees the others
// instead of leaving them waiting; and the calling thread's membership is scoped.
#include "kiln/core/thread_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::thread_group_test {
namespace {

double contribution(int member, int meeting, size_t k) {
  return member * 1e6 + meeting * 1e2 + double(k);
}

TEST(ThreadGroup, EveryMemberGetsEveryContributionInMemberOrder) {
  constexpr int kMembers = 3, kMeetings = 300;
  ThreadGroup group(kMembers);
  std::vector<int> mismatches(kMembers, 0);
  auto member = [&](int m) {
    for (int meeting = 0; meeting < kMeetings; ++meeting) {
      // Meetings of different sizes, and a member that is late now and then.
      const size_t n = size_t(1 + meeting % 7);
      std::vector<double> mine(n);
      for (size_t k = 0; k < n; ++k) mine[k] = contribution(m, meeting, k);
      if ((meeting + m) % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const std::vector<double> all = group.all_gather(m, mine);
      if (all.size() != n * kMembers) {
        ++mismatches[size_t(m)];
        continue;
      }
      for (int from = 0; from < kMembers; ++from) {
        for (size_t k = 0; k < n; ++k) {
          if (all[size_t(from) * n + k] != contribution(from, meeting, k)) ++mismatches[size_t(m)];
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int m = 0; m < kMembers; ++m) threads.emplace_back(member, m);
  for (std::thread& t : threads) t.join();
  for (int m = 0; m < kMembers; ++m) EXPECT_EQ(mismatches[size_t(m)], 0) << "member " << m;
}

TEST(ThreadGroup, AbortFreesAMemberWaitingForOneThatFailed) {
  ThreadGroup group(2);
  std::string waiting_error;
  std::thread waiting([&] {
    try {
      group.all_gather(0, std::vector<double>{1.0});
    } catch (const Error& e) {
      waiting_error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // member 0 is waiting by now
  group.abort();                                               // member 1 failed instead
  waiting.join();
  EXPECT_NE(waiting_error.find("another member of the group failed"), std::string::npos)
      << waiting_error;
  // Later meetings fail at once, until the group is reset for the next run.
  EXPECT_THROW(group.all_gather(1, std::vector<double>{2.0}), Error);
  group.reset();
  std::vector<double> got;
  std::thread other([&] { got = group.all_gather(1, std::vector<double>{2.0}); });
  group.all_gather(0, std::vector<double>{1.0});
  other.join();
  EXPECT_EQ(got, (std::vector<double>{1.0, 2.0}));
}

TEST(ThreadGroup, MembersMeetingWithDifferentSizesFail) {
  ThreadGroup group(2);
  std::string errors[2];
  auto member = [&](int m) {
    try {
      group.all_gather(m, std::vector<double>(size_t(m + 1), 0.0));
    } catch (const Error& e) {
      errors[m] = e.what();
    }
  };
  std::thread a(member, 0), b(member, 1);
  a.join();
  b.join();
  EXPECT_TRUE(errors[0].find("different computations") != std::string::npos ||
              errors[1].find("different computations") != std::string::npos)
      << errors[0] << " / " << errors[1];
}

TEST(ThreadGroup, MembershipIsTheCallingThreadsForItsScope) {
  EXPECT_EQ(ThreadGroup::Member::current(), nullptr);
  ThreadGroup outer(2), inner(3);
  {
    ThreadGroup::Member a(outer, 1);
    EXPECT_EQ(ThreadGroup::Member::current(), &a);
    {
      ThreadGroup::Member b(inner, 2);
      EXPECT_EQ(&ThreadGroup::Member::current()->group(), &inner);
      EXPECT_EQ(ThreadGroup::Member::current()->index(), 2);
    }
    EXPECT_EQ(ThreadGroup::Member::current(), &a);
    const ThreadGroup::Member* seen = &a;
    std::thread([&] { seen = ThreadGroup::Member::current(); }).join();
    EXPECT_EQ(seen, nullptr) << "another thread is not a member";
  }
  EXPECT_EQ(ThreadGroup::Member::current(), nullptr);
  EXPECT_THROW(ThreadGroup::Member(outer, 2), Error);
  EXPECT_THROW(ThreadGroup(0), Error);
}

}  // namespace
}  // namespace kiln::thread_group_test
