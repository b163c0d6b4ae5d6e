#pragma once
// Small synthetic data sets and helpers for the train tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/random.h"
#include "kiln/data/dataset.h"
#include "kiln/train/callback.h"

namespace kiln::train::testing {

// A random [n, 1, 28, 28] batch in [-1, 1) and its random labels in 0..9 (Fashion-MNIST's
// shapes without the data set).
inline Tensor batch_images(int64_t n, uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::empty({n, 1, 28, 28});
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = gen.uniform(-1.f, 1.f);
  return x;
}

inline Tensor batch_labels(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& l : v) l = int32_t(gen.next_u64() % 10);
  return Tensor::from_vector(v, Shape{n});
}

// rows × features f32 inputs with labels = argmax over 3 fixed projections (learnable).
inline data::Dataset synthetic_dataset(int64_t rows, int64_t features, int64_t batch,
                                          uint64_t seed = 11, bool shuffle = false,
                                          bool drop_remainder = true) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(size_t(rows * features));
  for (float& v : x) v = d(gen);
  std::vector<int32_t> y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float best = -1e30f;
    for (int k = 0; k < 3; ++k) {
      float s = 0;
      for (int64_t f = k; f < features; f += 3) s += x[size_t(r * features + f)];
      if (s > best) best = s, y[size_t(r)] = k;
    }
  }
  return data::NumpySlicesDataset(
             {Tensor::from_vector(x, {rows, features}), Tensor::from_vector(y, {rows})},
             {"data", "label"}, {.shuffle = shuffle})
      .batch(batch, drop_remainder);
}

// Records every step's loss (and the step numbers the callbacks saw).
class LossRecorder : public Callback {
 public:
  void on_train_step_end(RunContext& ctx) override {
    losses.push_back(ctx.original_args().net_outputs);
    steps.push_back(ctx.original_args().cur_step_num);
    sinks.push_back(ctx.original_args().steps_this_sink);
  }
  void on_train_epoch_end(RunContext&) override { ++epochs; }
  std::vector<float> losses;
  std::vector<int64_t> steps, sinks;
  int epochs = 0;
};

// Largest relative difference |a − b| / (1e-3 + |a|) between two states (tensors as raw floats),
// as the graph-vs-eager tests measure agreement.
inline double worst_difference(const std::vector<std::vector<float>>& a,
                               const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size());
    for (size_t k = 0; k < a[i].size() && k < b[i].size(); ++k) {
      worst = std::max(
          worst, std::abs(double(a[i][k]) - double(b[i][k])) / (1e-3 + std::abs(double(a[i][k]))));
    }
  }
  return worst;
}

inline std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p =
      fs::temp_directory_path() / ("kiln_train_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

}  // namespace kiln::train::testing
