// The fused optimizer-update ops through the dispatcher: table entries, in-place semantics,
// layout handling and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"

namespace kiln::ops::update_ops_test {
namespace {

Tensor random_gradient(int64_t n) {
  std::vector<float> g(static_cast<size_t>(n));
  uint32_t state = 12345;
  for (float& x : g) {
    state = state * 1664525u + 1013904223u;
    x = float(int32_t(state >> 8) - (1 << 23)) / float(1 << 23);
  }
  return Tensor::from_vector(g, {n});
}

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
  // The last input, optional, is the parameter's bf16 copy (written too).
  EXPECT_EQ(op_def(OpKind::sgd_update).mutated_inputs, 0b1001u);
  EXPECT_EQ(op_def(OpKind::momentum_update).mutated_inputs, 0b10101u);
  EXPECT_EQ(op_def(OpKind::adam_update).mutated_inputs, 0b1001101u);
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

// Parameter values of every magnitude, with ties to even, a NaN and infinities: the copy must
// round each exactly as a cast does.
Tensor awkward_values(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[size_t(i)] = std::ldexp(1.0f + float(i % 97) / 97.0f, int(i % 60) - 30) * (i % 2 ? -1 : 1);
  }
  v[3] = std::numeric_limits<float>::quiet_NaN();
  v[5] = std::numeric_limits<float>::infinity();
  v[8] = 1.0f + 1.0f / 256.0f;  // halfway between two bf16 values
  return Tensor::from_vector(v, {n});
}

// Each update with the optional copy: the parameter and state exactly as without it, and the
// copy exactly the new parameter cast to bf16 (every block, threads and the tail included).
void expect_copy_is_rounded_parameter(int64_t n) {
  const Tensor grad = random_gradient(n);
  const Tensor lr = Tensor::scalar(0.01), step = Tensor::scalar(0.001);
  for (OpKind kind : {OpKind::sgd_update, OpKind::momentum_update, OpKind::adam_update}) {
    SCOPED_TRACE(std::string(op_name(kind)));
    Tensor p = awkward_values(n), plain = p.clone();
    Tensor copy = Tensor::zeros({n}, DType::bf16);
    std::vector<Tensor> state{Tensor::zeros({n}), Tensor::zeros({n})};
    std::vector<Tensor> plain_state{Tensor::zeros({n}), Tensor::zeros({n})};
    auto inputs = [&](Tensor& param, std::vector<Tensor>& st) -> std::vector<Tensor> {
      switch (kind) {
        case OpKind::sgd_update:
          return {param, grad, lr};
        case OpKind::momentum_update:
          return {param, grad, st[0], lr};
        default:
          return {param, grad, st[0], st[1], step, lr};
      }
    };
    const Attrs attrs = kind == OpKind::sgd_update ? Attrs(SgdAttrs{.weight_decay = 0.01})
                        : kind == OpKind::momentum_update
                            ? Attrs(MomentumAttrs{.momentum = 0.9, .weight_decay = 0.01})
                            : Attrs(AdamAttrs{.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8});
    std::vector<Tensor> with_copy = inputs(p, state);
    with_copy.push_back(copy);
    call(kind, with_copy, attrs);
    call(kind, inputs(plain, plain_state), attrs);
    EXPECT_EQ(std::memcmp(p.raw_data(), plain.raw_data(), p.nbytes()), 0) << "the parameter";
    for (size_t k = 0; k < state.size(); ++k) {
      EXPECT_EQ(std::memcmp(state[k].raw_data(), plain_state[k].raw_data(), state[k].nbytes()), 0)
          << "state " << k;
    }
    Tensor cast = Tensor::empty({n}, DType::bf16);
    cast.copy_from(p);
    const bf16_t* a = copy.data<bf16_t>();
    const bf16_t* b = cast.data<bf16_t>();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i].bits, b[i].bits) << "copy " << i;
  }
}

TEST(UpdateOps, Bf16CopyIsTheNewParameterRoundedAsACastRoundsIt) {
  // Three whole blocks and a tail, above the thread threshold; and a copy written past the caches.
  for (int64_t n : {int64_t(3 * 2048 + 77), int64_t((1 << 17) + 77)}) {
    SCOPED_TRACE(n);
    expect_copy_is_rounded_parameter(n);
  }
}

TEST(UpdateOps, Bf16CopyOfAnotherShapeOrDtypeIsRefused) {
  Tensor p = Tensor::zeros({2, 3});
  for (const Tensor& copy : {Tensor::zeros({3, 2}, DType::bf16), Tensor::zeros({2, 3})}) {
    try {
      call(OpKind::sgd_update, {p, p, Tensor::scalar(0.1), copy}, SgdAttrs{});
      FAIL();
    } catch (const ShapeError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("sgd_update: the parameter's bf16 copy must be bf16[2, 3]"),
                std::string::npos)
          << m;
    }
  }
  try {
    call(OpKind::sgd_update, {p, p}, SgdAttrs{});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("sgd_update: expects 3 to 4 inputs, got 2"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::ops::update_ops_test
