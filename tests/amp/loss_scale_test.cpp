#include "kiln/amp/loss_scale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/core/error.h"

namespace kiln::amp::loss_scale_test {
namespace {

TEST(DynamicLossScale, OverflowSkipsTheStepAndHalvesTheScale) {
  DynamicLossScaleManager m(1024.0, 2.0, 3);
  EXPECT_TRUE(m.update(false));
  EXPECT_FALSE(m.update(true));
  EXPECT_EQ(m.scale(), 512.0);
  EXPECT_EQ(m.skipped_steps(), 1);
  // The window restarts after an overflow: three clean steps double the scale again.
  EXPECT_TRUE(m.update(false));
  EXPECT_TRUE(m.update(false));
  EXPECT_EQ(m.scale(), 512.0);
  EXPECT_TRUE(m.update(false));
  EXPECT_EQ(m.scale(), 1024.0);
}

TEST(DynamicLossScale, MindSporeDefaults) {
  DynamicLossScaleManager m;
  EXPECT_EQ(m.scale(), 16777216.0);  // 2^24
  for (int i = 0; i < 1999; ++i) m.update(false);
  EXPECT_EQ(m.scale(), 16777216.0);
  m.update(false);
  EXPECT_EQ(m.scale(), 33554432.0);
}

TEST(DynamicLossScale, ScaleNeverDropsBelowOne) {
  DynamicLossScaleManager m(2.0, 2.0, 10);
  for (int i = 0; i < 5; ++i) m.update(true);
  EXPECT_EQ(m.scale(), 1.0);
  EXPECT_EQ(m.skipped_steps(), 5);
}

TEST(FixedLossScale, DropsOverflowedUpdatesOnlyWhenAsked) {
  FixedLossScaleManager drop(128.0, true), keep(128.0, false);
  EXPECT_FALSE(drop.update(true));
  EXPECT_TRUE(keep.update(true));
  EXPECT_EQ(drop.scale(), 128.0);
  EXPECT_EQ(drop.skipped_steps(), 1);
  EXPECT_EQ(keep.skipped_steps(), 0);
}

TEST(LossScaleSpec, DefaultsFollowLevelAndDtype) {
  AmpConfig fp16_o2{AmpLevel::O2, DType::f16, true};
  AmpConfig bf16_o2{AmpLevel::O2, DType::bf16, true};
  EXPECT_NE(dynamic_cast<DynamicLossScaleManager*>(make_loss_scale_manager("", fp16_o2).get()),
            nullptr);
  EXPECT_EQ(make_loss_scale_manager("", bf16_o2), nullptr);
  auto fixed = make_loss_scale_manager("fixed:64", bf16_o2);
  ASSERT_NE(fixed, nullptr);
  EXPECT_EQ(fixed->scale(), 64.0);
  EXPECT_EQ(make_loss_scale_manager("none", fp16_o2), nullptr);
  EXPECT_THROW(make_loss_scale_manager("fixed:abc", bf16_o2), Error);
  EXPECT_THROW(make_loss_scale_manager("sometimes", bf16_o2), Error);
}

TEST(LossScaleSpec, DynamicTakesMindSporesThreeArguments) {
  auto manager = make_loss_scale_manager("dynamic:1024,4,3", {});
  ASSERT_NE(dynamic_cast<DynamicLossScaleManager*>(manager.get()), nullptr);
  EXPECT_EQ(manager->scale(), 1024.0);
  EXPECT_FALSE(manager->update(true));  // overflow: divided by the factor
  EXPECT_EQ(manager->scale(), 256.0);
  for (int step = 0; step < 3; ++step) EXPECT_TRUE(manager->update(false));
  EXPECT_EQ(manager->scale(), 1024.0);  // a clean window of 3: multiplied by the factor
  EXPECT_THROW(make_loss_scale_manager("dynamic:1024,4", {}), Error);
  EXPECT_THROW(make_loss_scale_manager("dynamic:1024,4,2.5", {}), Error);
  EXPECT_THROW(make_loss_scale_manager("dynamic:1024,1,3", {}), Error);  // factor must be > 1
  EXPECT_THROW(make_loss_scale_manager("fixed:64,2", {}), Error);
}

TEST(Overflow, DetectsInfAndNanInAnyDtype) {
  Tensor ok = Tensor::full({100000}, 1.5);
  Tensor inf = Tensor::full({3}, 1.0);
  inf.data<float>()[2] = std::numeric_limits<float>::infinity();
  Tensor nan = Tensor::full({4}, 1.0, DType::bf16);
  nan.data<bf16_t>()[1] = float_to_bf16(std::nanf(""));
  EXPECT_FALSE(has_overflow({ok}));
  EXPECT_TRUE(has_overflow({ok, inf}));
  EXPECT_TRUE(has_overflow({nan}));
}

TEST(AmpLevel, ParsesAndRejectsWithTheKeyNamed) {
  EXPECT_EQ(parse_level("O2"), AmpLevel::O2);
  try {
    parse_level("O5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("amp_level"), std::string::npos);
  }
  EXPECT_EQ(parse_low_dtype("fp16"), DType::f16);
  EXPECT_THROW(parse_low_dtype("fp8"), Error);
}

}  // namespace
}  // namespace kiln::amp::loss_scale_test
