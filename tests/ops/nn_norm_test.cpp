#include "kiln/ops/kernels/batch_norm_rows.h"
#include "nn_reference.h"

namespace kiln::testing::nn_norm_test {
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
  // Gradients for upstream dy, with the statistics used in the forward (batch ones in training,
  // where they depend on x too; running ones, constants, in eval).
  struct Grads {
    Values dx, dgamma, dbeta;
  };
  Grads backward(const Values& x, const Values& g, const Values& dy, const Values& mean,
                 const Values& var, bool training) const {
    Grads r{Values(x.size()), Values(size_t(c())), Values(size_t(c()))};
    double cnt = double(s[0] * inner());
    for (int64_t ch = 0; ch < c(); ++ch) {
      size_t i = size_t(ch);
      double is = 1.0 / std::sqrt(var[i] + eps);
      for_channel(ch, [&](size_t k) {
        r.dbeta[i] += dy[k];
        r.dgamma[i] += dy[k] * (x[k] - mean[i]) * is;
      });
      for_channel(ch, [&](size_t k) {
        double xhat = (x[k] - mean[i]) * is;
        r.dx[k] = training ? g[i] * is * (dy[k] - r.dbeta[i] / cnt - xhat * r.dgamma[i] / cnt)
                           : g[i] * is * dy[k];
      });
    }
    return r;
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

// Channels-last 4-D and row-major [N, C]: the layouts the rows kernel takes.
Tensor rows_layout(const Tensor& t) {
  return t.rank() == 4 ? channels_last_copy(t) : t;
}

// Same memory order (strides of extent-1 dims do not count).
void expect_same_layout(const Tensor& a, const Tensor& b, const char* what) {
  for (int d = 0; d < a.rank(); ++d) {
    if (a.dim(d) > 1) {
      EXPECT_EQ(a.strides()[size_t(d)], b.strides()[size_t(d)]) << what << d;
    }
  }
}

std::vector<Tensor> bn_grad(const Tensor& dy, const Tensor& x, const Tensor& g, const Tensor& mean,
                            const Tensor& inv_std, bool training) {
  ops::Attrs a = ops::BatchNormAttrs{.training = training, .eps = 1e-5};
  return ops::call(ops::OpKind::batch_norm_grad, {dy, x, g, mean, inv_std}, a);
}

// Forward (y, saved statistics, running statistics) and backward (dx, dgamma, dbeta) of one
// rows-layout case against the double reference, computed from the values as stored (so a bf16
// case is judged only on its own rounding).
void check_rows_case(const Shape& s, DType dtype, bool training, double y_tol, double dx_tol) {
  SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dtype)) + (training ? " train" : " eval"));
  BnRef ref{s};
  const int64_t c = s[1];
  auto stored = [&](Tensor t) { return rows_layout(dtype == DType::bf16 ? to_bf16(t) : t); };
  Tensor x = stored(random_tensor(s, 21, -2, 3)), dy = stored(random_tensor(s, 22));
  ASSERT_TRUE(ops::can_run_batch_norm_rows(x, {&dy}));
  Tensor g = positive({c}, 23), b = random_tensor({c}, 24);
  Tensor rm = random_tensor({c}, 25), rv = positive({c}, 26);
  Values xv = values_of(x), gv = values_of(g), rm0 = values_of(rm), rv0 = values_of(rv);
  std::vector<Tensor> out = ops::batch_norm(x, g, b, rm, rv, training, 0.9, 1e-5);
  expect_same_layout(out[0], x, "y stride ");
  EXPECT_EQ(out[0].dtype(), dtype);
  Values mean = rm0, var = rv0;
  if (training) ref.stats(xv, mean, var);
  expect_close(values_of(out[0]), ref.forward(xv, gv, values_of(b), mean, var), y_tol, y_tol, "y");
  Values inv_std;
  for (double v : var) inv_std.push_back(1.0 / std::sqrt(v + 1e-5));
  expect_close(values_of(out[1]), mean, 1e-5, 1e-5, "saved_mean");
  expect_close(values_of(out[2]), inv_std, 1e-5, 1e-5, "saved_inv_std");
  Values new_rm = rm0, new_rv = rv0;
  if (training) {
    double cnt = double(s.numel() / c);
    for (size_t i = 0; i < mean.size(); ++i) {
      new_rm[i] = 0.9 * rm0[i] + 0.1 * mean[i];
      new_rv[i] = 0.9 * rv0[i] + 0.1 * var[i] * cnt / (cnt - 1);
    }
  }
  expect_close(values_of(rm), new_rm, 1e-6, 1e-5, "running_mean");
  expect_close(values_of(rv), new_rv, 1e-6, 1e-5, "running_var");

  std::vector<Tensor> grads = bn_grad(dy, x, g, out[1], out[2], training);
  expect_same_layout(grads[0], x, "dx stride ");
  BnRef::Grads want = ref.backward(xv, gv, values_of(dy), mean, var, training);
  expect_close(values_of(grads[0]), want.dx, dx_tol, dx_tol, "dx");
  expect_close(values_of(grads[1]), want.dgamma, 1e-4, 1e-4, "dgamma");
  expect_close(values_of(grads[2]), want.dbeta, 1e-4, 1e-4, "dbeta");
}

// Channel counts of each kind the rows kernel distinguishes: one row per vector (16), rows of
// 2 or 4 vectors (32, 64), channels that pack whole vectors only over several rows (3, 24), and
// the generic loop (40, 100, 5000); sizes above and below the parallel threshold, and with a
// tail of rows that does not fill a period (odd row counts for C = 3, 24, 100).
TEST(NnBatchNorm, RowsLayoutsMatchReferenceForManyChannelCounts) {
  for (Shape s :
       {Shape{8, 16, 6, 6}, Shape{8, 32, 12, 12}, Shape{16, 64, 6, 6}, Shape{5, 24, 17, 19},
        Shape{7, 3, 5, 5}, Shape{300, 40}, Shape{1001, 100}, Shape{9, 5000}, Shape{6, 64, 1, 1}}) {
    check_rows_case(s, DType::f32, true, 1e-4, 1e-4);
  }
}

TEST(NnBatchNorm, RowsLayoutsInEvalModeUseRunningStats) {
  for (Shape s : {Shape{4, 16, 5, 5}, Shape{300, 40}, Shape{8, 32, 12, 12}}) {
    check_rows_case(s, DType::f32, false, 1e-4, 1e-4);
  }
  check_rows_case({8, 32, 12, 12}, DType::bf16, false, 2e-2, 2e-2);
}

TEST(NnBatchNorm, Bf16RowsWithinBf16ToleranceOfF32Reference) {
  for (Shape s : {Shape{8, 32, 12, 12}, Shape{16, 16, 5, 5}, Shape{9, 24, 7, 7}, Shape{500, 64},
                  Shape{8, 64, 7, 7}}) {
    check_rows_case(s, DType::bf16, true, 2e-2, 2e-2);
  }
}

// |mean| ≫ std: a one-pass E[x²] - E[x]² in float loses the variance entirely here (x² ≈ 1e6
// carries ~0.06 of rounding per element, the variance is 1/12); the shifted sums must not.
TEST(NnBatchNorm, VarianceStaysAccurateUnderLargeMeanOffset) {
  for (Shape s : {Shape{64, 16, 8, 8}, Shape{4096, 32}, Shape{6, 24, 5, 5}}) {
    SCOPED_TRACE(s.str());
    BnRef ref{s};
    Tensor x = rows_layout(random_tensor(s, 31, 999.5f, 1000.5f));
    Tensor g = positive({s[1]}, 32), b = random_tensor({s[1]}, 33);
    Tensor rm = Tensor::zeros({s[1]}), rv = Tensor::ones({s[1]});
    std::vector<Tensor> out = ops::batch_norm(x, g, b, rm, rv, true, 0.0, 1e-5);
    Values xv = values_of(x), mean, var, inv_std, unbiased;
    ref.stats(xv, mean, var);
    double cnt = double(s.numel() / s[1]);
    for (double v : var) {
      inv_std.push_back(1.0 / std::sqrt(v + 1e-5));
      unbiased.push_back(v * cnt / (cnt - 1));
    }
    expect_close(values_of(out[1]), mean, 1e-4, 0, "mean");
    expect_close(values_of(out[2]), inv_std, 0, 1e-4, "inv_std");
    expect_close(values_of(rv), unbiased, 0, 1e-4, "running_var (momentum 0: the batch's)");
    expect_close(values_of(out[0]), ref.forward(xv, values_of(g), values_of(b), mean, var), 2e-3, 0,
                 "y");
  }
}

// The op takes the rows kernel for these layouts: its results are the kernel's, bit for bit.
TEST(NnBatchNorm, OpRunsTheRowsKernelOnChannelsLastAnd2d) {
  EXPECT_TRUE(ops::is_rows_by_channels(channels_last_copy(Tensor::zeros({2, 8, 3, 3}))));
  EXPECT_TRUE(ops::is_rows_by_channels(Tensor::zeros({4, 8})));
  EXPECT_TRUE(ops::is_rows_by_channels(Tensor::zeros({4, 8, 1, 1})));
  EXPECT_FALSE(ops::is_rows_by_channels(Tensor::zeros({2, 8, 3, 3})));  // NCHW: oneDNN
  EXPECT_FALSE(ops::is_rows_by_channels(Tensor::zeros({4, 8, 5})));
  for (Shape s : {Shape{4, 32, 6, 6}, Shape{50, 16}}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      Tensor x32 = random_tensor(s, 41, -1, 2);
      Tensor x = rows_layout(dtype == DType::bf16 ? to_bf16(x32) : x32);
      Tensor dy =
          rows_layout(dtype == DType::bf16 ? to_bf16(random_tensor(s, 42)) : random_tensor(s, 42));
      Tensor g = positive({s[1]}, 43), b = random_tensor({s[1]}, 44);
      Tensor rm = Tensor::zeros({s[1]}), rv = Tensor::ones({s[1]});
      Tensor rm2 = rm.clone(), rv2 = rv.clone();
      std::vector<Tensor> op = ops::batch_norm(x, g, b, rm, rv, true, 0.9, 1e-5);
      Tensor y = Tensor::empty_like(x), mean = Tensor::empty({s[1]}),
             inv_std = Tensor::empty({s[1]});
      ops::batch_norm_rows_forward(x, g, b, rm2, rv2, nullptr, {}, y, mean, inv_std);
      expect_close(values_of(op[0]), values_of(y), 0, 0, "y");
      expect_close(values_of(op[2]), values_of(inv_std), 0, 0, "inv_std");
      expect_close(values_of(rv), values_of(rv2), 0, 0, "running_var");
      std::vector<Tensor> grads = bn_grad(dy, x, g, mean, inv_std, true);
      Tensor dx = Tensor::empty_like(x), dg = Tensor::empty({s[1]}), db = Tensor::empty({s[1]});
      ops::batch_norm_rows_backward(dy, nullptr, x, g, mean, inv_std, true, dx, dg, db);
      expect_close(values_of(grads[0]), values_of(dx), 0, 0, "dx");
      expect_close(values_of(grads[1]), values_of(dg), 0, 0, "dgamma");
    }
  }
}

// The fusions graph mode uses: relu(bn(x) + residual) in one pass, and the backward with the
// relu mask read from the forward's output, against the unfused ops.
TEST(NnBatchNorm, RowsKernelFusedResidualReluAndMaskMatchUnfusedOps) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const double tol = dtype == DType::bf16 ? 2e-2 : 1e-5;
    Shape s{8, 32, 10, 10};
    auto stored = [&](Tensor t) { return rows_layout(dtype == DType::bf16 ? to_bf16(t) : t); };
    Tensor x = stored(random_tensor(s, 51, -1, 2)), res = stored(random_tensor(s, 52));
    Tensor dy = stored(random_tensor(s, 53));
    Tensor g = positive({32}, 54), b = random_tensor({32}, 55);
    for (bool residual : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (residual ? " with residual" : ""));
      Tensor rm = Tensor::zeros({32}), rv = Tensor::ones({32});
      Tensor rm2 = rm.clone(), rv2 = rv.clone();
      std::vector<Tensor> bn = ops::batch_norm(x, g, b, rm, rv, true, 0.9, 1e-5);
      Tensor want = ops::relu(residual ? ops::add(bn[0], res) : bn[0]);
      Tensor r = Tensor::empty_like(x), mean = Tensor::empty({32}), inv_std = Tensor::empty({32});
      ops::batch_norm_rows_forward(x, g, b, rm2, rv2, residual ? &res : nullptr, {.relu = true}, r,
                                   mean, inv_std);
      expect_close(values_of(r), values_of(want), tol, tol, "relu(bn(x) [+ residual])");
      expect_close(values_of(rm2), values_of(rm), 0, 0, "running_mean");
      if (residual) continue;
      std::vector<Tensor> unfused = bn_grad(ops::relu_grad(dy, want), x, g, bn[1], bn[2], true);
      Tensor dx = Tensor::empty_like(x), dg = Tensor::empty({32}), db = Tensor::empty({32});
      ops::batch_norm_rows_backward(dy, &r, x, g, mean, inv_std, true, dx, dg, db);
      expect_close(values_of(dx), values_of(unfused[0]), tol, tol, "dx");
      expect_close(values_of(dg), values_of(unfused[1]), 1e-4, 1e-4, "dgamma");
      expect_close(values_of(db), values_of(unfused[2]), 1e-4, 1e-4, "dbeta");
    }
  }
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
}  // namespace kiln::testing::nn_norm_test
