#pragma once
// A short LeNet training run under the profiler, shared by the profile tests.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "kiln/core/context.h"
#include "kiln/data/dataset.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/momentum.h"
#include "kiln/profile/profiler.h"
#include "kiln/train/model.h"
#include "train/train_testing.h"

namespace kiln::profile::testing {

// `rows` random Fashion-MNIST-shaped images in batches of `batch` (a partial last batch is kept
// unless drop_remainder).
inline data::Dataset lenet_dataset(int64_t rows, int64_t batch, bool drop_remainder = true) {
  return data::NumpySlicesDataset(
             {train::testing::batch_images(rows, 3), train::testing::batch_labels(rows, 4)},
             {"data", "label"}, {.shuffle = false})
      .batch(batch, drop_remainder);
}

inline std::unique_ptr<train::Model> lenet_model() {
  auto net = models::create("lenet");
  auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.01));
  return std::make_unique<train::Model>(net, loss, opt);
}

// A fresh folder under the system's temporary folder, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Compiled steps take the per-kernel thread strategy for one test instead of racing the
// strategies, so one thread launches the whole batch's graph whatever the machine's load.
class PerKernelThreads {
 public:
  PerKernelThreads() {
    const char* given = std::getenv("KILN_THREAD_STRATEGY");
    if (given) before_ = given;
    setenv("KILN_THREAD_STRATEGY", "per_kernel", 1);
  }
  ~PerKernelThreads() {
    if (before_) {
      setenv("KILN_THREAD_STRATEGY", before_->c_str(), 1);
    } else {
      unsetenv("KILN_THREAD_STRATEGY");
    }
  }

 private:
  std::optional<std::string> before_;
};

// Sets the execution mode for one test.
class ModeGuard {
 public:
  explicit ModeGuard(ExecutionMode mode) : previous_(get_context()) {
    Context c = previous_;
    c.mode = mode;
    set_context(c);
  }
  ~ModeGuard() { set_context(previous_); }

 private:
  Context previous_;
};

}  // namespace kiln::profile::testing
