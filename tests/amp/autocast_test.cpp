#include "kiln/amp/autocast.h"

#include <gtest/gtest.h>

#include "kiln/autograd/tape.h"
#include "kiln/ops/cpu_support.h"
#include "kiln/ops/functional.h"
#include "testing/cpu_features.h"

namespace kiln::amp::autocast_test {
namespace {

using ops::OpKind;

std::optional<DType> dtype_for(OpKind kind, std::vector<DType> in, AmpLevel level,
                               bool keep_bn = true) {
  return compute_dtype(kind, in, AmpConfig{level, DType::bf16, keep_bn});
}

TEST(CastPlacement, O0LeavesEverythingAlone) {
  EXPECT_FALSE(dtype_for(OpKind::matmul, {DType::f32, DType::f32}, AmpLevel::O0));
  EXPECT_FALSE(dtype_for(OpKind::add, {DType::bf16, DType::f32}, AmpLevel::O0));
}

TEST(CastPlacement, O1LowersOnlyTheWhiteList) {
  EXPECT_EQ(dtype_for(OpKind::matmul, {DType::f32, DType::f32}, AmpLevel::O1), DType::bf16);
  EXPECT_EQ(dtype_for(OpKind::conv2d, {DType::f32, DType::f32, DType::f32}, AmpLevel::O1),
            DType::bf16);
  // fp32 ops widen low-precision inputs again.
  EXPECT_EQ(dtype_for(OpKind::softmax_cross_entropy, {DType::bf16, DType::i32}, AmpLevel::O1),
            DType::f32);
  // Elementwise ops follow: no cast between conv and relu, widening only for mixed inputs.
  EXPECT_FALSE(dtype_for(OpKind::relu, {DType::bf16}, AmpLevel::O1));
  EXPECT_FALSE(dtype_for(OpKind::relu, {DType::f32}, AmpLevel::O1));
  EXPECT_EQ(dtype_for(OpKind::add, {DType::bf16, DType::f32}, AmpLevel::O1), DType::f32);
}

TEST(CastPlacement, O2KeepsNormsAndLossInFp32) {
  EXPECT_EQ(dtype_for(OpKind::relu, {DType::f32}, AmpLevel::O2), DType::bf16);
  EXPECT_EQ(dtype_for(OpKind::add, {DType::bf16, DType::f32}, AmpLevel::O2), DType::bf16);
  // keep_batchnorm_fp32: bf16 data goes into BatchNorm as is (oneDNN computes it in fp32 with
  // the fp32 params and statistics), fp32 data stays fp32, f16 data (no f16 kernel) is widened.
  EXPECT_FALSE(dtype_for(OpKind::batch_norm,
                         {DType::bf16, DType::f32, DType::f32, DType::f32, DType::f32},
                         AmpLevel::O2));
  EXPECT_FALSE(dtype_for(OpKind::batch_norm,
                         {DType::f32, DType::f32, DType::f32, DType::f32, DType::f32},
                         AmpLevel::O2));
  EXPECT_EQ(dtype_for(OpKind::batch_norm,
                      {DType::f16, DType::f32, DType::f32, DType::f32, DType::f32}, AmpLevel::O2),
            DType::f32);
  EXPECT_EQ(dtype_for(OpKind::layer_norm, {DType::bf16, DType::f32, DType::f32}, AmpLevel::O2),
            DType::f32);
  EXPECT_EQ(dtype_for(OpKind::batch_norm,
                      {DType::f32, DType::f32, DType::f32, DType::f32, DType::f32}, AmpLevel::O2,
                      /*keep_bn=*/false),
            DType::bf16);
  EXPECT_EQ(dtype_for(OpKind::softmax_cross_entropy, {DType::bf16, DType::i64}, AmpLevel::O2),
            DType::f32);
}

TEST(CastPlacement, O3LowersEverything) {
  EXPECT_EQ(dtype_for(OpKind::softmax_cross_entropy, {DType::f32, DType::i64}, AmpLevel::O3),
            DType::bf16);
  EXPECT_EQ(dtype_for(OpKind::batch_norm,
                      {DType::f32, DType::f32, DType::f32, DType::f32, DType::f32}, AmpLevel::O3),
            DType::bf16);
}

TEST(CastPlacement, NeverTouchesCastsUpdatesOrIntegers) {
  EXPECT_FALSE(dtype_for(OpKind::cast, {DType::f32}, AmpLevel::O3));
  EXPECT_FALSE(dtype_for(OpKind::sgd_update, {DType::f32, DType::f32, DType::f32}, AmpLevel::O3));
  EXPECT_FALSE(dtype_for(OpKind::one_hot, {DType::i64}, AmpLevel::O3));
}

TEST(Autocast, O1MatmulRunsInBf16AndMasterWeightGradIsFp32) {
  if (!ops::arithmetic_available(DType::bf16)) GTEST_SKIP() << kiln::testing::kNoBf16Arithmetic;
  autograd::install_tape();
  Tensor x = Tensor::full({4, 8}, 0.5);
  Tensor w = Tensor::full({8, 3}, 0.25);
  w.set_requires_grad(true);
  Tensor y, loss;
  {
    AutocastScope scope(AmpConfig{.level = AmpLevel::O1, .strict = true});
    y = ops::matmul(x, w);
    loss = ops::sum(ops::cast(y, DType::f32));
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  std::vector<Tensor> g = autograd::grad(loss, {w});
  EXPECT_EQ(g[0].dtype(), DType::f32);  // the fp32 master weight gets an fp32 gradient
  // d(sum(x @ w))/dw[i][j] = sum over rows of x[:, i] = 4 * 0.5
  for (float v : g[0].to_vector<float>()) EXPECT_FLOAT_EQ(v, 2.0f);
}

TEST(Autocast, ScopeEndsAtItsBrace) {
  Tensor x = Tensor::full({2, 2}, 1.0);
  {
    AutocastScope scope(AmpConfig{AmpLevel::O3});
    EXPECT_EQ(ops::relu(x).dtype(), DType::bf16);
  }
  EXPECT_EQ(ops::relu(x).dtype(), DType::f32);
}

}  // namespace
}  // namespace kiln::amp::autocast_test
