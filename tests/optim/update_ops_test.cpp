// The fused optimizer-update ops through the dispatcher: table entries, in-place semantics,
// layout handling and errors.
#include <gtest/gtest.h>

#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"

namespace kiln::ops::update_ops_test {
namespace {

TEST(UpdateOps, TableEntriesDeclareMutationAndNoGrad) {
  for (OpKind k : {OpKind::sgd_update, OpKind::momentum_update, OpKind::adam_update}) {
    const OpDef& d = op_def(k);
    EXPECT_EQ(d.num_outputs, 0) << d.name;
    EXPECT_NE(d.mutated_inputs & 1u, 0u) << d.name;  // the parameter
    EXPECT_EQ(d.grad, nullptr) << d.name;
    ASSERT_NE(d.no_grad_reason, nullptr) << d.name;
    ASSERT_NE(d.cost, nullptr) << d.name;
    ASSERT_NE(d.kernel, nullptr) << d.name;
  }
  EXPECT_EQ(op_def(OpKind::momentum_update).mutated_inputs, 0b101u);
  EXPECT_EQ(op_def(OpKind::adam_update).mutated_inputs, 0b1101u);
  TensorMeta p{Shape{10}, DType::f32};
  TensorMeta s{Shape{}, DType::f32};
  std::vector<TensorMeta> in{p, p, p, p, s, s};
  Cost c = op_def(OpKind::adam_update).cost(in, {}, Attrs{});
  EXPECT_GT(c.flops, 0);
  EXPECT_DOUBLE_EQ(c.bytes, 7 * 10 * 4.0);
}

TEST(UpdateOps, SgdUpdatesInPlaceWithoutRecording) {
  Tensor p = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  p.set_requires_grad(true);
  Tensor g = Tensor::from_vector(std::vector<float>{1, 1, -1}, {3});
  void* before = p.raw_data();
  sgd_update(p, g, Tensor::scalar(0.5), 0.0);
  EXPECT_EQ(p.raw_data(), before);
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0.5f, 1.5f, 3.5f}));
  EXPECT_FALSE(p.autograd_meta().grad_fn);  // still a leaf
}

TEST(UpdateOps, GradientInAnotherLayoutOrDtype) {
  // A channels-last gradient for a contiguous [2,3,2,2] parameter.
  Shape shape{2, 3, 2, 2};
  std::vector<float> pv(24), gv(24);
  for (int i = 0; i < 24; ++i) {
    pv[size_t(i)] = float(i);
    gv[size_t(i)] = float(i % 5) - 2.f;
  }
  Tensor p = Tensor::from_vector(pv, shape);
  Tensor g_cl = Tensor::empty_strided(shape, channels_last_strides(shape), DType::f32);
  g_cl.copy_from(Tensor::from_vector(gv, shape));
  Tensor vel = Tensor::zeros(shape);
  momentum_update(p, g_cl, vel, Tensor::scalar(1.0), 0.9, 0.0, false);
  std::vector<float> got = p.to_vector<float>();
  for (int i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(got[size_t(i)], pv[size_t(i)] - gv[size_t(i)]);
  EXPECT_EQ(vel.to_vector<float>(), gv);

  Tensor bf = Tensor::empty(shape, DType::bf16);
  bf.copy_from(Tensor::from_vector(gv, shape));
  Tensor q = Tensor::from_vector(pv, shape);
  sgd_update(q, bf, Tensor::scalar(1.0), 0.0);
  got = q.to_vector<float>();
  for (int i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(got[size_t(i)], pv[size_t(i)] - gv[size_t(i)]);
}

TEST(UpdateOps, ErrorsNameOpAndShapes) {
  Tensor p = Tensor::zeros({2, 3});
  try {
    sgd_update(p, Tensor::zeros({3, 2}), Tensor::scalar(0.1), 0.0);
    FAIL();
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("sgd_update"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 2]"), std::string::npos) << m;
  }
  Tensor v = Tensor::zeros({2, 3}, DType::bf16);
  EXPECT_THROW(momentum_update(p, p, v, Tensor::scalar(0.1), 0.9, 0, false), ShapeError);
  Tensor m = Tensor::zeros({2, 3});
  EXPECT_THROW(
      adam_update(p, p, m, m, Tensor::zeros({2}), Tensor::scalar(0.1), 0.9, 0.999, 1e-8, 0, false),
      ShapeError);
  Tensor pi = Tensor::zeros({2, 3}, DType::i32);
  EXPECT_THROW(sgd_update(pi, p, Tensor::scalar(0.1), 0.0), ShapeError);
}

}  // namespace
}  // namespace kiln::ops::update_ops_test
