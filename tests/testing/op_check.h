#pragma once
// Shared checks for op tests: forward against a plain double-precision reference, and gradients
// against central finite differences of that same reference (computed in double).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "kiln/autograd/tape.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/functional.h"

namespace kiln::testing {

using Values = std::vector<double>;
// The op under test, on Kiln tensors.
using KilnFn = std::function<Tensor(const std::vector<Tensor>&)>;
// The reference: each input flattened (row-major) in, the output flattened out.
using RefFn = std::function<Values(const std::vector<Values>&)>;

inline Values values_of(const Tensor& t) {
  std::vector<float> f = t.to_vector<float>();
  return Values(f.begin(), f.end());
}

inline Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = dist(gen);
  return Tensor::from_vector(v, shape);
}

inline void expect_close(const Values& actual, const Values& expected, double atol, double rtol,
                         const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    double tol = atol + rtol * std::abs(expected[i]);
    ASSERT_NEAR(actual[i], expected[i], tol) << what << " at flat index " << i;
  }
}

inline void expect_forward_matches(const KilnFn& fn, const RefFn& ref,
                                   const std::vector<Tensor>& inputs, double atol = 1e-5,
                                   double rtol = 1e-4) {
  std::vector<Values> in;
  for (const Tensor& t : inputs) in.push_back(values_of(t));
  Tensor out = fn(inputs);
  expect_close(values_of(out), ref(in), atol, rtol, "forward");
}

// Checks d(sum(w * fn(x)))/dx from the autograd tape against central differences of the
// reference, for every input listed in `differentiable` (all inputs when empty).
inline void expect_gradients_match(const KilnFn& fn, const RefFn& ref, std::vector<Tensor> inputs,
                                   std::vector<int> differentiable = {}, double atol = 1e-3,
                                   double rtol = 1e-2, double step = 1e-6) {
  autograd::install_tape();
  if (differentiable.empty()) {
    for (size_t i = 0; i < inputs.size(); ++i) differentiable.push_back(int(i));
  }
  std::vector<Tensor> leaves;
  for (int i : differentiable) {
    inputs[size_t(i)] = inputs[size_t(i)].detach();
    inputs[size_t(i)].set_requires_grad(true);
    leaves.push_back(inputs[size_t(i)]);
  }
  Tensor out = fn(inputs);
  Tensor w = random_tensor(out.shape(), 1234, 0.5f, 1.5f);
  Tensor loss = ops::sum(ops::mul(out, w));
  std::vector<Tensor> grads = autograd::grad(loss, leaves);

  std::vector<Values> in;
  for (const Tensor& t : inputs) in.push_back(values_of(t));
  Values wv = values_of(w);
  auto objective = [&](const std::vector<Values>& x) {
    Values y = ref(x);
    double s = 0;
    for (size_t k = 0; k < y.size(); ++k) s += wv[k] * y[k];
    return s;
  };
  for (size_t li = 0; li < leaves.size(); ++li) {
    size_t i = size_t(differentiable[li]);
    Values numeric(in[i].size());
    for (size_t k = 0; k < in[i].size(); ++k) {
      double saved = in[i][k];
      in[i][k] = saved + step;
      double up = objective(in);
      in[i][k] = saved - step;
      double down = objective(in);
      in[i][k] = saved;
      numeric[k] = (up - down) / (2 * step);
    }
    expect_close(values_of(grads[li]), numeric, atol, rtol,
                 "gradient of input " + std::to_string(i));
  }
}

// Reference helper: broadcast index mapping (NumPy rules) for elementwise references.
inline Values broadcast_binary(const Values& a, const Shape& sa, const Values& b, const Shape& sb,
                               const std::function<double(double, double)>& f) {
  Shape out = broadcast_shapes(sa, sb, "reference");
  int r = out.rank();
  Values y(static_cast<size_t>(out.numel()));
  std::vector<int64_t> idx(static_cast<size_t>(r));
  auto flat = [&](const Shape& s) {
    int64_t off = 0;
    for (int d = 0; d < s.rank(); ++d) {
      int64_t i = idx[size_t(r - s.rank() + d)];
      off = off * s[d] + (s[d] == 1 ? 0 : i);
    }
    return off;
  };
  for (int64_t n = 0; n < out.numel(); ++n) {
    int64_t rem = n;
    for (int d = r - 1; d >= 0; --d) {
      idx[size_t(d)] = rem % out[d];
      rem /= out[d];
    }
    y[size_t(n)] = f(a[size_t(flat(sa))], b[size_t(flat(sb))]);
  }
  return y;
}

}  // namespace kiln::testing
