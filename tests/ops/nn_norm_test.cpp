#include "nn_reference.h"

namespace kiln::testing {
namespace {

// Batch norm of row-major [N, C, rest...] x with batch statistics (training) or given ones.
struct BnRef {
  Shape s;
  double eps = 1e-5;
  int64_t c() const { return s[1]; }
  int64_t inner() const { return s.numel() / (s[0] * s[1]); }
  template <class F>
  void for_channel(int64_t ch, F f) const {
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t i = 0; i < inner(); ++i) f(size_t((b * c() + ch) * inner() + i));
  }
  void stats(const Values& x, Values& mean, Values& var) const {
    mean.assign(size_t(c()), 0);
    var.assign(size_t(c()), 0);
    double cnt = double(s[0] * inner());
    for (int64_t ch = 0; ch < c(); ++ch) {
      for_channel(ch, [&](size_t k) { mean[size_t(ch)] += x[k] / cnt; });
      for_channel(ch, [&](size_t k) {
        var[size_t(ch)] += (x[k] - mean[size_t(ch)]) * (x[k] - mean[size_t(ch)]) / cnt;
      });
    }
  }
  Values forward(const Values& x, const Values& g, const Values& b, const Values& mean,
                 const Values& var) const {
    Values y(x.size());
    for (int64_t ch = 0; ch < c(); ++ch) {
      double is = 1.0 / std::sqrt(var[size_t(ch)] + eps);
      for_channel(ch, [&](size_t k) {
        y[k] = (x[k] - mean[size_t(ch)]) * is * g[size_t(ch)] + b[size_t(ch)];
      });
    }
    return y;
  }
  Values train(const Values& x, const Values& g, const Values& b) const {
    Values mean, var;
    stats(x, mean, var);
    return forward(x, g, b, mean, var);
  }
};

Tensor positive(const Shape& s, uint64_t seed) {
  return random_tensor(s, seed, 0.5f, 1.5f);
}

TEST(NnBatchNorm, TrainingUsesBatchStatsAndUpdatesRunningStats) {
  for (Shape s : {Shape{4, 3, 2, 3}, Shape{6, 5}}) {
    BnRef ref{s};
    Tensor x = random_tensor(s, 1, -2, 3), g = positive({s[1]}, 2), b = random_tensor({s[1]}, 3);
    Tensor rm = random_tensor({s[1]}, 4), rv = positive({s[1]}, 5);
    Values rm0 = values_of(rm), rv0 = values_of(rv);
    for (bool cl : {false, true}) {
      if (cl && s.rank() != 4) continue;
      Tensor rm_t = rm.clone(), rv_t = rv.clone();
      Tensor xin = cl ? channels_last_copy(x) : x;
      std::vector<Tensor> out = ops::batch_norm(xin, g, b, rm_t, rv_t, true, 0.9, 1e-5);
      if (cl) {
        EXPECT_TRUE(out[0].is_channels_last());
      }
      expect_close(values_of(out[0]), ref.train(values_of(x), values_of(g), values_of(b)), 1e-4,
                   1e-4, "train y " + s.str());
      Values mean, var;
      ref.stats(values_of(x), mean, var);
      double cnt = double(s.numel() / s[1]);
      Values inv_std, new_rm, new_rv;
      for (size_t i = 0; i < mean.size(); ++i) {
        inv_std.push_back(1.0 / std::sqrt(var[i] + 1e-5));
        new_rm.push_back(0.9 * rm0[i] + 0.1 * mean[i]);
        new_rv.push_back(0.9 * rv0[i] + 0.1 * var[i] * cnt / (cnt - 1));  // unbiased
      }
      expect_close(values_of(out[1]), mean, 1e-5, 1e-4, "saved_mean");
      expect_close(values_of(out[2]), inv_std, 1e-4, 1e-4, "saved_inv_std");
      expect_close(values_of(rm_t), new_rm, 1e-5, 1e-4, "running_mean");
      expect_close(values_of(rv_t), new_rv, 1e-5, 1e-4, "running_var");
    }
  }
}

TEST(NnBatchNorm, EvalUsesRunningStatsAndLeavesThem) {
  Shape s{3, 4, 2, 2};
  BnRef ref{s};
  Tensor x = random_tensor(s, 6), g = positive({4}, 7), b = random_tensor({4}, 8);
  Tensor rm = random_tensor({4}, 9), rv = positive({4}, 10);
  Values rm0 = values_of(rm), rv0 = values_of(rv);
  std::vector<Tensor> out = ops::batch_norm(x, g, b, rm, rv, false, 0.9, 1e-5);
  expect_close(values_of(out[0]), ref.forward(values_of(x), values_of(g), values_of(b), rm0, rv0),
               1e-5, 1e-4, "eval y");
  expect_close(values_of(rm), rm0, 0, 0, "running_mean untouched");
  expect_close(values_of(rv), rv0, 0, 0, "running_var untouched");
}

TEST(NnBatchNorm, GradientMatchesFiniteDifferencesInTrainAndEval) {
  Shape s{3, 2, 2, 3};
  BnRef ref{s};
  Tensor rm = random_tensor({2}, 11), rv = positive({2}, 12);
  Values rm0 = values_of(rm), rv0 = values_of(rv);
  for (bool training : {true, false}) {
    for (bool cl : {false, true}) {
      Tensor x = random_tensor(s, 13);
      if (cl) x = channels_last_copy(x);
      expect_gradients_match(
          [&](const std::vector<Tensor>& t) {
            Tensor m = rm.clone(), v = rv.clone();
            return ops::batch_norm(t[0], t[1], t[2], m, v, training, 0.9, 1e-5)[0];
          },
          [&](const std::vector<Values>& t) {
            return training ? ref.train(t[0], t[1], t[2]) : ref.forward(t[0], t[1], t[2], rm0, rv0);
          },
          {x, positive({2}, 14), random_tensor({2}, 15)});
    }
  }
}

TEST(NnBatchNorm, Bf16InputWithF32ParametersWithinBf16Tolerance) {
  Shape s{4, 16, 3, 3};
  BnRef ref{s};
  Tensor x = channels_last_copy(to_bf16(random_tensor(s, 16, -2, 2)));
  Tensor g = positive({16}, 17), b = random_tensor({16}, 18);
  Tensor rm = Tensor::zeros({16}), rv = Tensor::ones({16});
  std::vector<Tensor> out = ops::batch_norm(x, g, b, rm, rv, true, 0.9, 1e-5);
  EXPECT_EQ(out[0].dtype(), DType::bf16);
  EXPECT_EQ(out[1].dtype(), DType::f32);
  expect_close(values_of(out[0]), ref.train(values_of(x), values_of(g), values_of(b)), 2e-2, 1e-2,
               "bf16 batch_norm");
}

TEST(NnBatchNorm, BadInputsNameOpAndShapes) {
  expect_error_mentions(
      [] {
        ops::batch_norm(Tensor::zeros({2, 3, 4, 4}), Tensor::ones({4}), Tensor::zeros({3}),
                        Tensor::zeros({3}), Tensor::ones({3}), true, 0.9, 1e-5);
      },
      {"batch_norm", "gamma", "f32[2, 3, 4, 4]", "f32[4]"});
  expect_error_mentions(
      [] {
        ops::batch_norm(Tensor::zeros({3}), Tensor::ones({3}), Tensor::zeros({3}),
                        Tensor::zeros({3}), Tensor::ones({3}), true, 0.9, 1e-5);
      },
      {"batch_norm", "[N, C, ...]", "[3]"});
}

// Layer norm over the trailing dims covered by gamma's shape.
Values ln_ref(const Values& x, const Values& g, const Values& b, int64_t d, double eps) {
  Values y(x.size());
  for (size_t r = 0; r < x.size() / size_t(d); ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mean += x[r * size_t(d) + size_t(j)] / double(d);
    for (int64_t j = 0; j < d; ++j) {
      double e = x[r * size_t(d) + size_t(j)] - mean;
      var += e * e / double(d);
    }
    for (int64_t j = 0; j < d; ++j) {
      size_t k = r * size_t(d) + size_t(j);
      y[k] = (x[k] - mean) / std::sqrt(var + eps) * g[size_t(j)] + b[size_t(j)];
    }
  }
  return y;
}

TEST(NnLayerNorm, ForwardAndStatsMatchReference) {
  for (auto [xs, gs] : {std::pair<Shape, Shape>{{4, 6}, {6}}, {{2, 3, 4}, {3, 4}}}) {
    int64_t d = gs.numel();
    Tensor x = random_tensor(xs, 1, -2, 2), g = positive(gs, 2), b = random_tensor(gs, 3);
    std::vector<Tensor> out = ops::layer_norm(x, g, b, 1e-5);
    expect_close(values_of(out[0]), ln_ref(values_of(x), values_of(g), values_of(b), d, 1e-5), 1e-5,
                 1e-4, "layer_norm " + xs.str());
    EXPECT_EQ(out[1].shape(), Shape(std::vector<int64_t>(xs.begin(), xs.end() - gs.rank())));
    Values xv = values_of(x), mean = values_of(out[1]);
    for (size_t r = 0; r < mean.size(); ++r) {
      double m = 0;
      for (int64_t j = 0; j < d; ++j) m += xv[r * size_t(d) + size_t(j)] / double(d);
      EXPECT_NEAR(mean[r], m, 1e-5);
    }
  }
}

TEST(NnLayerNorm, GradientMatchesFiniteDifferences) {
  for (auto [xs, gs] : {std::pair<Shape, Shape>{{3, 5}, {5}}, {{2, 2, 3}, {2, 3}}}) {
    int64_t d = gs.numel();
    expect_gradients_match(
        [&](const std::vector<Tensor>& t) { return ops::layer_norm(t[0], t[1], t[2], 1e-5)[0]; },
        [&](const std::vector<Values>& t) { return ln_ref(t[0], t[1], t[2], d, 1e-5); },
        {random_tensor(xs, 4), positive(gs, 5), random_tensor(gs, 6)});
  }
}

TEST(NnLayerNorm, BadInputsNameOpAndShapes) {
  expect_error_mentions(
      [] {
        ops::layer_norm(Tensor::zeros({2, 3}), Tensor::ones({4}), Tensor::zeros({4}), 1e-5);
      },
      {"layer_norm", "trailing", "f32[2, 3]", "f32[4]"});
}

}  // namespace
}  // namespace kiln::testing
