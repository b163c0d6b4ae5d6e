#include "kiln/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "kiln/core/error.h"

namespace kiln::optim::lr_schedule_test {
namespace {

TEST(LrSchedule, PiecewiseConstant) {
  auto lr = piecewise_constant_lr({2, 5}, {0.1, 0.05, 0.01});
  EXPECT_DOUBLE_EQ(lr(0), 0.1);
  EXPECT_DOUBLE_EQ(lr(1), 0.1);
  EXPECT_DOUBLE_EQ(lr(2), 0.05);
  EXPECT_DOUBLE_EQ(lr(4), 0.05);
  EXPECT_DOUBLE_EQ(lr(5), 0.01);
  EXPECT_DOUBLE_EQ(lr(500), 0.01);
  auto ms = piecewise_constant_lr({2, 5}, {0.1, 0.05});  // MindSpore's form: last value holds
  EXPECT_DOUBLE_EQ(ms(7), 0.05);
  EXPECT_THROW(piecewise_constant_lr({5, 2}, {1, 2}), Error);
  EXPECT_THROW(piecewise_constant_lr({1, 2}, {1}), Error);
}

TEST(LrSchedule, StepLr) {
  auto lr = step_lr(1.0, 3, 0.5);
  EXPECT_DOUBLE_EQ(lr(2), 1.0);
  EXPECT_DOUBLE_EQ(lr(3), 0.5);
  EXPECT_DOUBLE_EQ(lr(7), 0.25);
}

TEST(LrSchedule, Cosine) {
  auto lr = cosine_decay_lr(0.0, 1.0, 10);
  EXPECT_DOUBLE_EQ(lr(0), 1.0);
  EXPECT_NEAR(lr(5), 0.5, 1e-12);
  EXPECT_NEAR(lr(3), 0.5 * (1 + std::cos(std::numbers::pi * 0.3)), 1e-12);
  EXPECT_NEAR(lr(10), 0.0, 1e-12);
  EXPECT_NEAR(lr(20), 0.0, 1e-12);
  EXPECT_THROW(cosine_decay_lr(0, 1, 0), Error);
}

TEST(LrSchedule, WarmupComposesWithCosine) {
  auto lr = linear_warmup(cosine_decay_lr(0.0, 0.1, 100), 4);
  EXPECT_NEAR(lr(0), 0.025, 1e-12);
  EXPECT_NEAR(lr(1), 0.05, 1e-12);
  EXPECT_NEAR(lr(3), 0.1, 1e-12);
  EXPECT_NEAR(lr(4), 0.1, 1e-12);  // cosine starts after warm-up
  EXPECT_NEAR(lr(54), 0.05, 1e-12);
  auto from_half = linear_warmup(constant_lr(1.0), 2, 0.5);
  EXPECT_NEAR(from_half(0), 0.75, 1e-12);
  EXPECT_NEAR(from_half(1), 1.0, 1e-12);
}

}  // namespace
}  // namespace kiln::optim::lr_schedule_test
