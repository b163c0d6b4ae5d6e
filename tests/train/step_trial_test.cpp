// StepTrial (train/step_trial.h) driven with made-up step times: the schedule alternates blocks
// in rotating order, and the choice follows the median cost through noise, drift and stalls.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/train/step_trial.h"

namespace kiln::train::step_trial_test {
namespace {

using Clock = StepTrial::Clock;

// Runs `trial` to its decision (and 20 steps past it), each step of candidate k costing
// cost(k, step index) seconds. Returns the candidates handed out, in order.
std::vector<int> drive(StepTrial& trial, const std::function<double(int, int)>& cost) {
  Clock::time_point now{};
  std::vector<int> order;
  int after = 0;
  for (int step = 0; step < 100000 && after < 20; ++step) {
    const int k = trial.next(now);
    order.push_back(k);
    if (trial.decided()) ++after;
    now +=
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cost(k, step)));
  }
  return order;
}

TEST(StepTrial, BlocksAlternateInRotatingOrder) {
  StepTrial trial({1.0, 1.0}, 0.002);  // 2 ms steps: blocks of 15, 12 rounds
  EXPECT_EQ(trial.steps_per_block(), 15);
  EXPECT_EQ(trial.rounds(), 12);
  const std::vector<int> order = drive(trial, [](int, int) { return 0.002; });
  const int block = trial.steps_per_block();
  for (int i = 0; i < block; ++i) {
    EXPECT_EQ(order[size_t(i)], 0) << "round 0 starts with candidate 0, step " << i;
    EXPECT_EQ(order[size_t(block + i)], 1) << "then candidate 1, step " << i;
    EXPECT_EQ(order[size_t(2 * block + i)], 1) << "round 1 starts with candidate 1, step " << i;
    EXPECT_EQ(order[size_t(3 * block + i)], 0) << "then candidate 0, step " << i;
  }
  // Every step but the first of each block is counted.
  EXPECT_EQ(trial.counted_steps(), int64_t(trial.rounds()) * 2 * (block - 1));
  EXPECT_EQ(order.size(), size_t(trial.rounds()) * 2 * size_t(block) + 20);
}

TEST(StepTrial, SlowStepsGetShortBlocksAndFewRounds) {
  StepTrial slow({1.0, 1.0, 1.0}, 0.5);
  EXPECT_EQ(slow.steps_per_block(), 3);
  EXPECT_EQ(slow.rounds(), 4);
  StepTrial fast({1.0, 1.0}, 1e-5);
  EXPECT_EQ(fast.steps_per_block(), 16);
  EXPECT_EQ(fast.rounds(), 12);
}

TEST(StepTrial, ChoosesTheFasterThroughNoiseDriftAndStalls) {
  for (int faster : {0, 1, 2}) {
    Generator gen(11 + uint64_t(faster));
    StepTrial trial({1.0, 1.0, 1.0}, 0.002);
    drive(trial, [&](int k, int step) {
      // 5% apart, each step +-20% at random, the machine drifting by 15% over the trial, and a
      // stall (an evaluation, a log line) every 50 steps.
      const double base = k == faster ? 0.0019 : 0.0020;
      const double drift = 1.0 + 0.15 * std::sin(double(step) / 200.0);
      const double stall = step % 50 == 49 ? 0.3 : 0.0;
      return base * drift * gen.uniform(0.8f, 1.2f) + stall;
    });
    ASSERT_TRUE(trial.decided());
    EXPECT_EQ(trial.winner(), faster);
    EXPECT_EQ(trial.next(Clock::time_point{}), faster) << "decided: the winner from then on";
  }
}

TEST(StepTrial, AHandicapMustBeOvercome) {
  // Candidate 1 is 1% faster but must win by 3%.
  StepTrial close({1.0, 1.03}, 0.002);
  drive(close, [](int k, int) { return k == 1 ? 0.00198 : 0.002; });
  EXPECT_EQ(close.winner(), 0);
  StepTrial clear({1.0, 1.03}, 0.002);
  drive(clear, [](int k, int) { return k == 1 ? 0.0019 : 0.002; });
  EXPECT_EQ(clear.winner(), 1);
}

TEST(StepTrial, AClearLeadEndsTheTrialAfterFourRounds) {
  // 15% apart, +-5% noise: decided once 4 rounds are in, not after all 12.
  Generator gen(5);
  StepTrial clear({1.0, 1.0}, 0.002);
  drive(clear, [&](int k, int) { return (k == 1 ? 0.0017 : 0.002) * gen.uniform(0.95f, 1.05f); });
  EXPECT_EQ(clear.winner(), 1);
  EXPECT_TRUE(clear.decided_early());
  EXPECT_EQ(clear.counted_steps(), int64_t(4) * 2 * (clear.steps_per_block() - 1));
  // 5% apart: all the rounds, as close candidates need.
  StepTrial close({1.0, 1.0}, 0.002);
  drive(close, [&](int k, int) { return (k == 1 ? 0.0019 : 0.002) * gen.uniform(0.95f, 1.05f); });
  EXPECT_EQ(close.winner(), 1);
  EXPECT_FALSE(close.decided_early());
  EXPECT_EQ(close.counted_steps(), int64_t(close.rounds()) * 2 * (close.steps_per_block() - 1));
  // A 15% lead the handicap eats into (1.08): no longer clear.
  StepTrial handicapped({1.0, 1.08}, 0.002);
  drive(handicapped, [](int k, int) { return k == 1 ? 0.0017 : 0.002; });
  EXPECT_EQ(handicapped.winner(), 1);
  EXPECT_FALSE(handicapped.decided_early());
}

TEST(StepTrial, NeedsTwoCandidates) {
  EXPECT_THROW(StepTrial({1.0}, 0.002), Error);
}

}  // namespace
}  // namespace kiln::train::step_trial_test
