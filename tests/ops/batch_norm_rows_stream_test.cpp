// BatchNormRowsOptions::stream_output changes only how y is stored (past the caches), never what
// is stored: y must be bit for bit what plain stores write, in every layout the kernels take,
// and where streaming stores cannot run (bf16, a period that is not whole vectors, a y that is not
// 64-byte aligned) the kernel must fall back to plain stores instead of faulting.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "kiln/core/random.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/kernels/batch_norm_rows.h"

namespace kiln::testing::batch_norm_rows_stream_test {
namespace {

Tensor random_activation(const Shape& s, DType dtype, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v(size_t(s.numel()));
  for (float& e : v) e = gen.uniform(-1.0f, 3.0f);
  Tensor t = Tensor::empty_strided(s, channels_last_strides(s), dtype);
  if (dtype == DType::f32) {
    std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(float));
  } else {
    bf16_t* p = t.data<bf16_t>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = float_to_bf16(v[i]);
  }
  return t;
}

struct Case {
  Shape shape;
  bool blocked = false;
  DType dtype = DType::f32;
  // y starts this many elements past a 64-byte boundary (0: aligned).
  int64_t y_misalignment = 0;
};

// y of one training forward, written into a buffer `c.y_misalignment` elements past the start
// of an aligned allocation.
std::vector<uint8_t> forward(const Case& c, bool residual, bool relu, bool stream) {
  const int64_t ch = c.shape[1];
  const Tensor x = random_activation(c.shape, c.dtype, 1);
  const Tensor r = random_activation(c.shape, c.dtype, 2);
  Generator gen(3);
  std::vector<float> g(static_cast<size_t>(ch)), b(static_cast<size_t>(ch));
  for (int64_t i = 0; i < ch; ++i) {
    g[size_t(i)] = gen.uniform(0.5f, 2.0f);
    b[size_t(i)] = gen.uniform(-1.0f, 1.0f);
  }
  const Tensor gamma = Tensor::from_vector(g, {ch}), beta = Tensor::from_vector(b, {ch});
  const Tensor running_mean = Tensor::zeros({ch}), running_var = Tensor::ones({ch});
  const Tensor mean = Tensor::empty({ch}), inv_std = Tensor::empty({ch});
  const Tensor storage = Tensor::empty({c.shape.numel() + 16}, c.dtype);  // 64-byte aligned
  const Tensor y = storage.view_as(c.shape, channels_last_strides(c.shape), c.y_misalignment);
  ops::BatchNormRowsOptions o;
  o.relu = relu;
  o.blocked = c.blocked;
  o.stream_output = stream;
  ops::batch_norm_rows_forward(x, gamma, beta, running_mean, running_var, residual ? &r : nullptr,
                               o, y, mean, inv_std);
  const auto* bytes = static_cast<const uint8_t*>(y.raw_data());
  return std::vector<uint8_t>(bytes, bytes + y.nbytes());
}

void expect_streaming_writes_the_same(const Case& c) {
  SCOPED_TRACE(c.shape.str() + (c.blocked ? " nChw16c " : " rows ") +
               std::string(dtype_name(c.dtype)) + " y +" + std::to_string(c.y_misalignment));
  for (bool residual : {false, true}) {
    for (bool relu : {false, true}) {
      SCOPED_TRACE(std::string(residual ? "+residual" : "") + (relu ? " +relu" : ""));
      const std::vector<uint8_t> plain = forward(c, residual, relu, false);
      const std::vector<uint8_t> streamed = forward(c, residual, relu, true);
      ASSERT_EQ(plain.size(), streamed.size());
      EXPECT_EQ(std::memcmp(plain.data(), streamed.data(), plain.size()), 0);
    }
  }
}

TEST(BatchNormRowsStream, StreamingStoresWriteWhatPlainStoresWrite) {
  // Large enough to split over the threads, with a scalar tail where the split leaves one.
  expect_streaming_writes_the_same({.shape = {128, 16, 9, 9}});
  expect_streaming_writes_the_same({.shape = {64, 32, 7, 7}, .blocked = true});
  // C = 24: periods of three whole vectors (two rows).
  expect_streaming_writes_the_same({.shape = {65, 24, 5, 5}});
  // Rows of two channels: whole vectors of eight rows, then a tail of two elements.
  expect_streaming_writes_the_same({.shape = {20001, 2}});
}

TEST(BatchNormRowsStream, FallsBackToPlainStoresWhereStreamingCannotRun) {
  // C = 20: a period of 80 elements is not whole vectors handled as such.
  expect_streaming_writes_the_same({.shape = {64, 20, 6, 6}});
  // y one element past a 64-byte boundary.
  expect_streaming_writes_the_same({.shape = {128, 16, 9, 9}, .y_misalignment = 1});
  expect_streaming_writes_the_same({.shape = {64, 32, 7, 7}, .blocked = true, .y_misalignment = 3});
  // bf16 storage has no streaming path.
  expect_streaming_writes_the_same({.shape = {128, 16, 9, 9}, .dtype = DType::bf16});
}

TEST(BatchNormRowsStream, OneThreadAndThreeThreadsToo) {
  const int threads = omp_get_max_threads();
  for (int t : {1, 3}) {
    omp_set_num_threads(t);
    SCOPED_TRACE(std::to_string(t) + " threads");
    expect_streaming_writes_the_same({.shape = {128, 16, 9, 9}});
    expect_streaming_writes_the_same({.shape = {35, 32, 9, 7}, .blocked = true});
  }
  omp_set_num_threads(threads);
}

}  // namespace
}  // namespace kiln::testing::batch_norm_rows_stream_test
