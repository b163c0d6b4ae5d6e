#pragma once
// Training callbacks with MindSpore's hooks and parameters. A callback sees the run through
// RunContext::original_args(); in dataset sink mode the step hooks fire once per sink (begin
// before its first step, end after its last), not per step, and step_losses holds the loss of
// every step of the sink.
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/nn/cell.h"
#include "kiln/optim/optimizer.h"

namespace kiln::train {

class Model;

struct CallbackParams {
  Model* model = nullptr;
  nn::Cell* train_network = nullptr;
  optim::Optimizer* optimizer = nullptr;
  int64_t epoch_num = 0;          // epochs this run trains to
  int64_t cur_epoch_num = 0;      // 1-based
  int64_t batch_num = -1;         // steps per epoch (-1: unknown)
  int64_t cur_step_num = 0;       // 1-based global step (continues across a resume)
  int64_t cur_step_in_epoch = 0;  // 1-based
  int64_t steps_this_sink = 1;    // steps run since the last step_end (>1 in sink mode)
  float net_outputs = 0.f;        // the last step's loss
  // The loss of each of those steps_this_sink steps, in order (the last is net_outputs).
  std::vector<float> step_losses;
  bool dataset_sink_mode = false;
  int64_t batch_size = 0;  // rows in the last batch
};

class RunContext {
 public:
  explicit RunContext(CallbackParams* params) : params_(params) {}
  CallbackParams& original_args() { return *params_; }
  // Ends training after the current step (MindSpore's run_context.request_stop()).
  void request_stop() { stop_ = true; }
  bool get_stop_requested() const { return stop_; }

 private:
  CallbackParams* params_;
  bool stop_ = false;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(RunContext&) {}
  virtual void on_train_epoch_begin(RunContext&) {}
  virtual void on_train_step_begin(RunContext&) {}
  virtual void on_train_step_end(RunContext&) {}
  virtual void on_train_epoch_end(RunContext&) {}
  virtual void on_train_end(RunContext&) {}
};
using CallbackPtr = std::shared_ptr<Callback>;

}  // namespace kiln::train
