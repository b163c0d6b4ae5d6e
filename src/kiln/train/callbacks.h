#pragma once
// The standard callbacks: LossMonitor, TimeMonitor, ModelCheckpoint (+ CheckpointConfig).
#include <chrono>
#include <deque>
#include <iosfwd>
#include <map>
#include <string>

#include "kiln/train/callback.h"

namespace kiln::train {

// Prints "epoch: 1 step: 100, loss is 0.51" every per_print_times steps (step counted within the
// epoch, as MindSpore does). A NaN or infinite loss ends training with an Error naming the
// epoch and step. In sink mode the lines of a sink's steps come together at its end, the same
// lines as without sink mode.
class LossMonitor : public Callback {
 public:
  explicit LossMonitor(int64_t per_print_times = 1, std::ostream* out = nullptr);
  void on_train_begin(RunContext& ctx) override;
  void on_train_step_end(RunContext& ctx) override;

 private:
  int64_t per_print_times_;
  int64_t last_print_step_ = 0;
  std::ostream* out_;
};

// Prints "Train epoch time: 1234.567 ms, per step time: 1.316 ms" at each epoch's end.
// data_size: steps per epoch (0: count them).
class TimeMonitor : public Callback {
 public:
  explicit TimeMonitor(int64_t data_size = 0, std::ostream* out = nullptr);
  void on_train_epoch_begin(RunContext& ctx) override;
  void on_train_step_end(RunContext& ctx) override;
  void on_train_epoch_end(RunContext& ctx) override;

 private:
  int64_t data_size_;
  int64_t steps_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
  std::ostream* out_;
};

struct CheckpointConfig {
  int64_t save_checkpoint_steps = 1;  // every N global steps (0: only at epoch ends / the end)
  int64_t keep_checkpoint_max = 5;    // older files are deleted (0: keep all)
  bool save_at_epoch_end = false;     // also at each epoch's end
  bool save_optimizer_state = true;   // needed to resume
  std::map<std::string, std::string> metadata = {};  // written into every checkpoint (the model)
};

// Writes "<directory>/<prefix>-<epoch>_<step_in_epoch>.safetensors" atomically, keeps the newest
// keep_checkpoint_max of the folder (counting files of earlier runs too), and writes a final one
// at the end of training. On train begin it deletes temporary files of killed writers. The newest
// file is also reachable as latest_checkpoint().
class ModelCheckpoint : public Callback {
 public:
  ModelCheckpoint(std::string prefix = "CKP", std::string directory = ".",
                  CheckpointConfig config = {});
  void on_train_begin(RunContext& ctx) override;
  void on_train_step_end(RunContext& ctx) override;
  void on_train_epoch_end(RunContext& ctx) override;
  void on_train_end(RunContext& ctx) override;
  const std::string& latest_checkpoint() const { return latest_; }

 private:
  void save(const CallbackParams& p);

  std::string prefix_, directory_;
  CheckpointConfig config_;
  std::string latest_;
  int64_t last_saved_step_ = -1;
  int64_t last_trigger_step_ = 0;
};

}  // namespace kiln::train
