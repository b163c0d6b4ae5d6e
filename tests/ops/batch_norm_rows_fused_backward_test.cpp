// The fused backward variants of the batch-norm rows kernels against the unfused steps they
// replace, bit for bit. The relu_grad + batch-norm backward may find the relu's mask from x
// (recomputing the forward's pre-relu value) instead of reading the relu output r: it must pass
// exactly the elements r lets through. The add + relu_grad + batch-norm backward computes the
// masked sum of two gradients in its first pass.
#include <gtest/gtest.h>

#include <vector>

#include "kiln/core/random.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/kernels/batch_norm_rows.h"

namespace kiln::testing::batch_norm_rows_fused_backward_test {
namespace {

Tensor uniform_tensor(const Shape& s, uint64_t seed, float lo, float hi, bool channels_last = false,
                      DType dtype = DType::f32) {
  Generator gen(seed);
  Tensor t = channels_last ? Tensor::empty_strided(s, channels_last_strides(s), dtype)
                           : Tensor::empty(s, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = gen.uniform(lo, hi);
    if (dtype == DType::bf16) {
      t.data<bf16_t>()[i] = float_to_bf16(v);
    } else {
      t.data<float>()[i] = v;
    }
  }
  return t;
}

void expect_bitwise_equal(const Tensor& a, const Tensor& b, const char* what) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  ASSERT_EQ(x.size(), y.size());
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += x[i] == y[i] ? 0 : 1;
  EXPECT_EQ(differ, 0u) << what;
}

void check_mask_from_input(const Shape& shape, bool blocked, bool training) {
  const int64_t c = shape[1];
  Tensor x = uniform_tensor(shape, 1, -2.0f, 2.0f, shape.rank() == 4);
  Tensor gamma = uniform_tensor({c}, 2, 0.5f, 1.5f), beta = uniform_tensor({c}, 3, -0.5f, 0.5f);
  // Some channels with beta 0 and gamma 1: pre-relu values land exactly on 0 for the elements
  // equal to the mean's float, the case where "> 0" must match bit for bit.
  beta.data<float>()[0] = 0.0f;
  gamma.data<float>()[0] = 1.0f;
  Tensor rm = Tensor::zeros({c}), rv = Tensor::ones({c});
  Tensor r = Tensor::empty_like(x), mean = Tensor::empty({c}), inv_std = Tensor::empty({c});
  ops::batch_norm_rows_forward(
      x, gamma, beta, rm, rv, nullptr,
      {.training = training, .momentum = 0.9, .eps = 1e-5, .relu = true, .blocked = blocked}, r,
      mean, inv_std);
  Tensor dy = uniform_tensor(shape, 4, -1.0f, 1.0f, shape.rank() == 4);
  Tensor dx_r = Tensor::empty_like(x), dg_r = Tensor::empty({c}), db_r = Tensor::empty({c});
  Tensor dx_x = Tensor::empty_like(x), dg_x = Tensor::empty({c}), db_x = Tensor::empty({c});
  ops::batch_norm_rows_backward(dy, &r, x, gamma, mean, inv_std, training, dx_r, dg_r, db_r,
                                blocked);
  ops::batch_norm_rows_backward(dy, &r, x, gamma, mean, inv_std, training, dx_x, dg_x, db_x,
                                blocked, &beta);
  expect_bitwise_equal(dx_x, dx_r, "dx");
  expect_bitwise_equal(dg_x, dg_r, "dgamma");
  expect_bitwise_equal(db_x, db_r, "dbeta");
  // And the mask is real: without it the gradients differ.
  Tensor dx_n = Tensor::empty_like(x), dg_n = Tensor::empty({c}), db_n = Tensor::empty({c});
  ops::batch_norm_rows_backward(dy, nullptr, x, gamma, mean, inv_std, training, dx_n, dg_n, db_n,
                                blocked);
  EXPECT_NE(db_n.to_vector<float>(), db_r.to_vector<float>());
}

TEST(BatchNormRowsReluMask, FromInputMatchesFromOutputBitForBit) {
  check_mask_from_input({4, 24, 5, 3}, false, true);     // channels-last, odd period
  check_mask_from_input({64, 16, 10, 10}, false, true);  // parallel
  check_mask_from_input({37, 48}, false, true);          // [N, C]
  check_mask_from_input({8, 32, 7, 7}, true, true);      // nChw16c
  check_mask_from_input({8, 32, 7, 7}, true, false);     // eval
}

// bf16 storage keeps reading r (rounding could turn a tiny positive pre-relu value into 0).
TEST(BatchNormRowsReluMask, Bf16ReadsTheReluOutput) {
  const Shape s{2, 16, 3, 3};
  Tensor x = uniform_tensor(s, 1, -2.0f, 2.0f, true, DType::bf16);
  Tensor gamma = uniform_tensor({16}, 2, 0.5f, 1.5f), beta = uniform_tensor({16}, 3, -0.5f, 0.5f);
  Tensor rm = Tensor::zeros({16}), rv = Tensor::ones({16});
  Tensor r = Tensor::empty_like(x), mean = Tensor::empty({16}), inv_std = Tensor::empty({16});
  ops::batch_norm_rows_forward(x, gamma, beta, rm, rv, nullptr, {.relu = true}, r, mean, inv_std);
  Tensor dy = uniform_tensor(s, 4, -1.0f, 1.0f, true, DType::bf16);
  // A relu output of all zeros: reading r, nothing passes; recomputing from x, much would.
  Tensor zeros = Tensor::empty_like(r);
  for (int64_t i = 0; i < zeros.numel(); ++i) zeros.data<bf16_t>()[i] = float_to_bf16(0.0f);
  Tensor dx = Tensor::empty_like(x), dg = Tensor::empty({16}), db = Tensor::empty({16});
  ops::batch_norm_rows_backward(dy, &zeros, x, gamma, mean, inv_std, true, dx, dg, db, false,
                                &beta);
  for (float v : db.to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

// batch_norm_rows_backward_add_relu against add, relu_grad and the plain backward in turn: the
// masked sum it writes and every gradient are bit for bit the same, in both layouts.
void check_add_relu(const Shape& shape, bool blocked, bool training) {
  const int64_t c = shape[1];
  Tensor a = uniform_tensor(shape, 1, -1.0f, 1.0f, true),
         b = uniform_tensor(shape, 2, -1.0f, 1.0f, true);
  Tensor r = uniform_tensor(shape, 3, -1.0f, 2.0f, true),
         x = uniform_tensor(shape, 4, -2.0f, 2.0f, true);
  Tensor gamma = uniform_tensor({c}, 5, 0.5f, 1.5f), mean = uniform_tensor({c}, 6, -0.5f, 0.5f);
  Tensor inv_std = uniform_tensor({c}, 7, 0.5f, 2.0f);
  // What add then relu_grad write: (a + b) where r > 0 (elementwise, so layout-blind).
  Tensor t = Tensor::empty_like(a);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float sum = a.data<float>()[i] + b.data<float>()[i];
    t.data<float>()[i] = r.data<float>()[i] > 0.0f ? sum : 0.0f;
  }
  Tensor dx_ref = Tensor::empty_like(x), dg_ref = Tensor::empty({c}), db_ref = Tensor::empty({c});
  ops::batch_norm_rows_backward(t, nullptr, x, gamma, mean, inv_std, training, dx_ref, dg_ref,
                                db_ref, blocked);
  Tensor dy = Tensor::empty_like(x), dx = Tensor::empty_like(x), dg = Tensor::empty({c}),
         db = Tensor::empty({c});
  ops::batch_norm_rows_backward_add_relu(a, b, r, x, gamma, mean, inv_std, training, dy, dx, dg, db,
                                         blocked);
  expect_bitwise_equal(dy, t, "masked sum");
  expect_bitwise_equal(dx, dx_ref, "dx");
  expect_bitwise_equal(dg, dg_ref, "dgamma");
  expect_bitwise_equal(db, db_ref, "dbeta");
}

TEST(BatchNormRowsAddRelu, MatchesAddReluGradThenBackwardBitForBit) {
  check_add_relu({4, 24, 5, 3}, false, true);     // channels-last, odd period
  check_add_relu({64, 16, 10, 10}, false, true);  // parallel
  check_add_relu({8, 32, 7, 7}, true, true);      // nChw16c
  check_add_relu({8, 64, 7, 7}, true, false);     // nChw16c, eval
}

}  // namespace
}  // namespace kiln::testing::batch_norm_rows_fused_backward_test
