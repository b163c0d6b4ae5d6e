#pragma once
// What a sharded run must share with the single-process run it is compared against: every
// step's loss, the gathered parameters, the checkpoint read back and an evaluation, each within
// 1e-5 relative (fp32).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/comm/communicator.h"
#include "kiln/nn/cell.h"
#include "kiln/parallel/semi_auto.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/compiled_step.h"

namespace kiln::testing {

struct TrainedRun {
  std::vector<float> losses;
  std::vector<nn::NamedTensor> params;
  std::vector<nn::NamedTensor> checkpoint;  // as saved by save_checkpoint, read back
  Tensor eval_logits;                       // evaluate() on batch 0 after training
  std::string plan;
};

inline void expect_close(const std::vector<nn::NamedTensor>& got,
                         const std::vector<nn::NamedTensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first) << what;
    const std::vector<float> g = got[i].second.to_vector<float>();
    const std::vector<float> w = want[i].second.to_vector<float>();
    ASSERT_EQ(g.size(), w.size()) << what << " " << want[i].first;
    double scale = 0, worst = 0;
    for (size_t j = 0; j < w.size(); ++j) {
      scale = std::max(scale, double(std::fabs(w[j])));
      worst = std::max(worst, double(std::fabs(g[j] - w[j])));
    }
    EXPECT_LE(worst, 1e-5 * scale) << what << " " << want[i].first << " on rank " << comm::rank();
  }
}

inline void expect_same_training(const TrainedRun& got, const TrainedRun& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::fabs(want.losses[s]))
        << "step " << s << " on rank " << comm::rank();
  }
  expect_close(got.params, want.params, "gathered parameters");
  expect_close(got.checkpoint, want.checkpoint, "checkpoint");
  expect_close({{"logits", got.eval_logits}}, {{"logits", want.eval_logits}}, "evaluate");
}

// After training: the gathered parameters, the checkpoint every rank saves (under SEMI_AUTO or
// AUTO rank 0 writes the gathered whole tensors; one file per rank for reference runs) read back,
// and evaluate() on (x, y).
inline void finish_run(TrainedRun& out, nn::Cell& net, train::CompiledTrainStep& step,
                       const Tensor& x, const Tensor& y, bool sharded, const std::string& stem) {
  out.params = parallel::gather_whole(net.parameters_and_names());
  out.eval_logits = step.evaluate(x, y).first;
  const std::string name = stem + (sharded ? "" : "_ref_" + std::to_string(comm::rank()));
  const std::string path =
      (std::filesystem::temp_directory_path() / (name + ".safetensors")).string();
  train::save_checkpoint(net, path);
  comm::barrier();
  out.checkpoint = train::load_checkpoint(path).tensors;
  comm::barrier();
  if (!sharded || comm::rank() == 0) std::filesystem::remove(path);
}

// Whether the plan's text keeps `weight` split on the ranks (each rank holds a block of it).
inline bool holds_split(const std::string& plan, const std::string& weight) {
  std::istringstream lines(plan);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("parameter " + weight + " ") != std::string::npos &&
        line.find(": split [") != std::string::npos)
      return true;
  }
  return false;
}

// Whether the plan's text runs an op with `weight` split (model parallel, not the batch split).
inline bool runs_model_parallel(const std::string& plan, const std::string& weight) {
  std::istringstream lines(plan);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("model parallel: ") != std::string::npos &&
        line.find(weight + " split") != std::string::npos)
      return true;
  }
  return false;
}

}  // namespace kiln::testing
