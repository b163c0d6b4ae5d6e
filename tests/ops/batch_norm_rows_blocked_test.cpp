// The blocked (nChw16c) mode of the batch-norm rows kernels against their channels-last mode:
// the same logical tensors, laid out both ways, must give the same results. The channels-last
// mode itself is checked against a double reference in nn_norm_test.cpp.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/kernels/batch_norm_rows.h"

namespace kiln::testing::batch_norm_rows_blocked_test {
namespace {

using Values = std::vector<float>;  // a logical [N, C, H, W] tensor, row-major

// Flat offset of logical element (n, c, h, w) in nChw16c.
int64_t blocked_offset(const Shape& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return ((n * (s[1] / 16) + c / 16) * s[2] * s[3] + h * s[3] + w) * 16 + c % 16;
}

// Flat offset of logical element (n, c, h, w) channels-last.
int64_t rows_offset(const Shape& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return ((n * s[2] + h) * s[3] + w) * s[1] + c;
}

// f(logical index, flat offset) for every element, in nChw16c or channels-last memory.
template <class F>
void for_each_index(const Shape& s, F f, bool blocked_layout = true) {
  size_t i = 0;
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t w = 0; w < s[3]; ++w) {
          f(i++, blocked_layout ? blocked_offset(s, n, c, h, w) : rows_offset(s, n, c, h, w));
        }
}

// Values rounded to what `dtype` stores, so both layouts hold exactly the same numbers.
Values random_values(const Shape& s, DType dtype, uint64_t seed, float lo, float hi) {
  Generator gen(seed);
  Values v(size_t(s.numel()));
  for (float& e : v) {
    e = gen.uniform(lo, hi);
    if (dtype == DType::bf16) e = bf16_to_float(float_to_bf16(e));
  }
  return v;
}

// A channels-last [N, C, H, W] tensor holding v, its memory channels-last or (blocked) nChw16c.
Tensor laid_out(const Values& v, const Shape& s, DType dtype, bool blocked_layout) {
  Tensor t = Tensor::empty_strided(s, channels_last_strides(s), dtype);
  if (dtype == DType::bf16) {
    bf16_t* p = t.data<bf16_t>();
    for_each_index(
        s, [&](size_t i, int64_t off) { p[off] = float_to_bf16(v[i]); }, blocked_layout);
  } else {
    float* p = t.data<float>();
    for_each_index(
        s, [&](size_t i, int64_t off) { p[off] = v[i]; }, blocked_layout);
  }
  return t;
}
Tensor channels_last(const Values& v, const Shape& s, DType dtype) {
  return laid_out(v, s, dtype, false);
}
Tensor blocked(const Values& v, const Shape& s, DType dtype) {
  return laid_out(v, s, dtype, true);
}

Values values_of(const Tensor& t, bool blocked_layout) {
  Values v(size_t(t.numel()));
  if (t.dtype() == DType::bf16) {
    const bf16_t* p = t.data<bf16_t>();
    for_each_index(
        t.shape(), [&](size_t i, int64_t off) { v[i] = bf16_to_float(p[off]); }, blocked_layout);
  } else {
    const float* p = t.data<float>();
    for_each_index(
        t.shape(), [&](size_t i, int64_t off) { v[i] = p[off]; }, blocked_layout);
  }
  return v;
}
Values from_blocked(const Tensor& t) {
  return values_of(t, true);
}
Values from_rows(const Tensor& t) {
  return t.rank() == 4 ? values_of(t, false) : t.to_vector<float>();
}

// |got - want| <= tol·max(|want|, floor) elementwise. bf16 results may round the other way (the
// float sums run in another order), so their tolerance is two bf16 ulps.
void expect_near(const Values& got, const Values& want, double tol, double floor,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double allowed = tol * std::max(std::fabs(double(want[i])), floor);
    if (!(std::fabs(double(got[i]) - double(want[i])) <= allowed) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: blocked " << got[i] << " vs rows " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " differ";
}

double output_tol(DType dtype) {
  return dtype == DType::bf16 ? 1.0 / 128 : 2e-5;
}

struct Stats {
  Tensor running_mean, running_var, mean, inv_std;
  explicit Stats(int64_t c, uint64_t seed) {
    running_mean = Tensor::from_vector(random_values({c}, DType::f32, seed, -1, 1), {c});
    running_var = Tensor::from_vector(random_values({c}, DType::f32, seed + 1, 0.5, 2), {c});
    mean = Tensor::empty({c});
    inv_std = Tensor::empty({c});
  }
};

// One forward case both ways; y, the saved and the running statistics must agree.
void check_forward(const Shape& s, DType dtype, bool training, bool residual, bool relu) {
  SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dtype)) + (training ? " train" : " eval") +
               (residual ? " +residual" : "") + (relu ? " +relu" : ""));
  const int64_t c = s[1];
  // Means far from 0 and far apart per channel: the variance is then accurate only if each
  // channel's sums are shifted by a value of that channel (see batch_stats).
  Values x = random_values(s, dtype, 1, 1, 5);
  for_each_index(s, [&](size_t i, int64_t) {
    const int64_t channel = int64_t(i) / (s[2] * s[3]) % c;
    x[i] = float(x[i] + 40.0 * double(channel));
    if (dtype == DType::bf16) x[i] = bf16_to_float(float_to_bf16(x[i]));
  });
  const Values r = random_values(s, dtype, 2, -1, 1);
  const Tensor gamma = Tensor::from_vector(random_values({c}, DType::f32, 3, 0.5, 2), {c});
  const Tensor beta = Tensor::from_vector(random_values({c}, DType::f32, 4, -1, 1), {c});
  ops::BatchNormRowsOptions o;
  o.training = training;
  o.relu = relu;

  Stats rows_stats(c, 5), blocked_stats(c, 5);
  const Tensor x_rows = channels_last(x, s, dtype), r_rows = channels_last(r, s, dtype);
  const Tensor y_rows = Tensor::empty_strided(s, channels_last_strides(s), dtype);
  ops::batch_norm_rows_forward(x_rows, gamma, beta, rows_stats.running_mean, rows_stats.running_var,
                               residual ? &r_rows : nullptr, o, y_rows, rows_stats.mean,
                               rows_stats.inv_std);

  const Tensor x_blocked = blocked(x, s, dtype), r_blocked = blocked(r, s, dtype);
  const Tensor y_blocked = Tensor::empty_strided(s, channels_last_strides(s), dtype);
  o.blocked = true;
  ops::batch_norm_rows_forward(x_blocked, gamma, beta, blocked_stats.running_mean,
                               blocked_stats.running_var, residual ? &r_blocked : nullptr, o,
                               y_blocked, blocked_stats.mean, blocked_stats.inv_std);

  expect_near(from_blocked(y_blocked), from_rows(y_rows), output_tol(dtype), 1.0, "y");
  expect_near(from_rows(blocked_stats.mean), from_rows(rows_stats.mean), 1e-6, 1e-3, "mean");
  expect_near(from_rows(blocked_stats.inv_std), from_rows(rows_stats.inv_std), 1e-6, 1.0,
              "inv_std");
  expect_near(from_rows(blocked_stats.running_mean), from_rows(rows_stats.running_mean), 1e-6, 1e-3,
              "running_mean");
  expect_near(from_rows(blocked_stats.running_var), from_rows(rows_stats.running_var), 1e-6, 1.0,
              "running_var");
}

// One backward case both ways; dx, dgamma and dbeta must agree.
void check_backward(const Shape& s, DType dtype, bool training, bool relu_mask) {
  SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dtype)) + (training ? " train" : " eval") +
               (relu_mask ? " +relu mask" : ""));
  const int64_t c = s[1];
  const Values x = random_values(s, dtype, 11, 1, 5), dy = random_values(s, dtype, 12, -1, 1);
  // About a third of relu_out is <= 0, so the mask cuts.
  const Values relu_out = random_values(s, dtype, 13, -1, 2);
  const Tensor gamma = Tensor::from_vector(random_values({c}, DType::f32, 14, 0.5, 2), {c});
  const Tensor mean = Tensor::from_vector(random_values({c}, DType::f32, 15, 2.5, 3.5), {c});
  const Tensor inv_std = Tensor::from_vector(random_values({c}, DType::f32, 16, 0.6, 1.0), {c});

  auto run = [&](auto layout, bool is_blocked, Tensor& dgamma, Tensor& dbeta) {
    const Tensor dy_t = layout(dy, s, dtype), x_t = layout(x, s, dtype);
    const Tensor relu_t = layout(relu_out, s, dtype);
    const Tensor dx_t = Tensor::empty_strided(s, channels_last_strides(s), dtype);
    dgamma = Tensor::empty({c});
    dbeta = Tensor::empty({c});
    ops::batch_norm_rows_backward(dy_t, relu_mask ? &relu_t : nullptr, x_t, gamma, mean, inv_std,
                                  training, dx_t, dgamma, dbeta, is_blocked);
    return dx_t;
  };
  Tensor dgamma_rows, dbeta_rows, dgamma_blocked, dbeta_blocked;
  const Tensor dx_rows = run(channels_last, false, dgamma_rows, dbeta_rows);
  const Tensor dx_blocked = run(blocked, true, dgamma_blocked, dbeta_blocked);

  // Sums over M elements: scale the floor with sqrt(M) (their typical size).
  const double sum_floor = std::sqrt(double(s.numel() / c));
  expect_near(from_blocked(dx_blocked), from_rows(dx_rows), output_tol(dtype), 1.0, "dx");
  expect_near(from_rows(dgamma_blocked), from_rows(dgamma_rows), 1e-6, sum_floor, "dgamma");
  expect_near(from_rows(dbeta_blocked), from_rows(dbeta_rows), 1e-6, sum_floor, "dbeta");
}

void check_all(const Shape& s, DType dtype) {
  for (bool residual : {false, true}) {
    for (bool relu : {false, true}) check_forward(s, dtype, true, residual, relu);
  }
  check_forward(s, dtype, false, false, false);
  check_forward(s, dtype, false, true, true);
  for (bool training : {true, false}) {
    for (bool mask : {false, true}) check_backward(s, dtype, training, mask);
  }
}

// Small shapes run on one thread: one chunk per image ([2,16,4,4]), several channel blocks with
// odd H·W ([4,32,5,3], [3,48,7,7]).
TEST(BatchNormRowsBlocked, MatchesChannelsLastF32) {
  for (Shape s : {Shape{2, 16, 4, 4}, Shape{4, 32, 5, 3}, Shape{3, 48, 7, 7}}) {
    check_all(s, DType::f32);
  }
}

TEST(BatchNormRowsBlocked, MatchesChannelsLastBf16) {
  for (Shape s : {Shape{2, 16, 4, 4}, Shape{4, 32, 5, 3}, Shape{3, 48, 7, 7}}) {
    check_all(s, DType::bf16);
  }
}

// Large enough to run in parallel: [128,64,7,7] splits at a chunk boundary on 2 threads,
// [35,16,9,7] and 3 threads split inside chunks.
TEST(BatchNormRowsBlocked, MatchesChannelsLastInParallel) {
  const int threads = omp_get_max_threads();
  for (int t : {2, 3}) {
    omp_set_num_threads(t);
    SCOPED_TRACE(std::to_string(t) + " threads");
    for (DType dtype : {DType::f32, DType::bf16}) {
      check_all(Shape{128, 64, 7, 7}, dtype);
      check_all(Shape{35, 16, 9, 7}, dtype);
    }
  }
  omp_set_num_threads(threads);
}

TEST(BatchNormRowsBlocked, RejectsTensorsItCannotRun) {
  const Shape bad{2, 24, 3, 3};
  const Values zeros(size_t(bad.numel()), 0.0f);
  const Tensor x = channels_last(zeros, bad, DType::f32), y = channels_last(zeros, bad, DType::f32);
  const Tensor stat = Tensor::ones({24});
  EXPECT_TRUE(ops::can_run_batch_norm_rows(x, {&y}));  // fine as rows, not as blocks
  EXPECT_FALSE(ops::can_run_batch_norm_blocked(x, {&y}));
  ops::BatchNormRowsOptions o;
  o.blocked = true;
  EXPECT_THROW(ops::batch_norm_rows_forward(x, stat, stat, stat, stat, nullptr, o, y, stat, stat),
               Error);
  EXPECT_THROW(ops::batch_norm_rows_backward(y, nullptr, x, stat, stat, stat, true, y, stat, stat,
                                             /*blocked=*/true),
               Error);
  // A residual of another shape is refused too.
  const Shape good{2, 32, 3, 3};
  const Tensor gx = Tensor::zeros(good), gy = Tensor::zeros(good),
               gr = Tensor::zeros({2, 32, 3, 4});
  const Tensor gstat = Tensor::ones({32});
  EXPECT_TRUE(ops::can_run_batch_norm_blocked(gx, {&gy}));
  EXPECT_FALSE(ops::can_run_batch_norm_blocked(gx, {&gy, &gr}));
  EXPECT_THROW(
      ops::batch_norm_rows_forward(gx, gstat, gstat, gstat, gstat, &gr, o, gy, gstat, gstat),
      Error);
  // Rank 3 and integer tensors are refused.
  const Tensor r3 = Tensor::zeros({2, 32, 9});
  EXPECT_FALSE(ops::can_run_batch_norm_blocked(r3, {}));
  EXPECT_FALSE(ops::can_run_batch_norm_blocked(Tensor::zeros(good, DType::i32), {}));
}

}  // namespace
}  // namespace kiln::testing::batch_norm_rows_blocked_test
