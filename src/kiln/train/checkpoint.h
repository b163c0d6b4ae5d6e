#pragma once
// Checkpoints in the safetensors layout (readable by other tools; loading executes nothing).
// A checkpoint holds the network's parameters and buffers under their path names
// ("features.0.weight"), optionally the optimizer's state under "optimizer.<name>", and string
// metadata (epoch, global step, optimizer name) for resuming.
#include <map>
#include <string>
#include <vector>

#include "kiln/nn/cell.h"
#include "kiln/optim/optimizer.h"

namespace kiln::train {

inline constexpr const char* kOptimizerPrefix = "optimizer.";

struct Checkpoint {
  std::string source;  // the file it came from, for messages
  std::vector<nn::NamedTensor> tensors;
  std::map<std::string, std::string> metadata;
  bool verified = false;  // it carried checksums (tensors and metadata) and they all matched
  // Null when absent.
  const Tensor* find(const std::string& name) const;
};

struct SaveOptions {
  const optim::Optimizer* optimizer = nullptr;  // also save its state (for resuming)
  int64_t epoch = 0;                            // epochs finished
  int64_t step_in_epoch = 0;                    // steps finished in the current epoch
  std::map<std::string, std::string> metadata;  // extra string metadata
};

// Writes net's parameters and buffers (and the optimizer's state) to `path` atomically: a crash
// or kill at any point leaves the previous file at `path` intact. Under SEMI_AUTO_PARALLEL every
// rank must call it: the split parameters are gathered whole and rank 0 writes them.
void save_checkpoint(const nn::Cell& net, const std::string& path, const SaveOptions& options = {});
void save_checkpoint(const std::vector<nn::NamedTensor>& tensors, const std::string& path,
                     const std::map<std::string, std::string>& metadata = {});

// Reads and validates a checkpoint; FileError naming the file and byte offset when it is
// truncated, damaged (a tensor or the metadata fails its checksum) or lies about its contents.
Checkpoint load_checkpoint(const std::string& path);

// Copies checkpoint values into net's parameters and buffers (in place: the network's tensors
// keep their storage). A shape mismatch is a ShapeError naming the parameter and both shapes.
// Returns the network entries the checkpoint lacks; with strict_load those are an Error naming
// them, as are checkpoint entries the network does not have (optimizer state excepted).
std::vector<std::string> load_param_into_net(nn::Cell& net, const Checkpoint& checkpoint,
                                             bool strict_load = false);

// Restores the optimizer's state ("optimizer.*" entries); Error when they are missing.
void load_optimizer_state(optim::Optimizer& optimizer, const Checkpoint& checkpoint);

// The checkpoints "<prefix>-<epoch>_<step>.safetensors" in `directory`, whoever wrote them, oldest
// first (by modification time, then epoch and step).
std::vector<std::string> list_checkpoints(const std::string& directory, const std::string& prefix);

// Deletes the temporary files that writers killed mid-write left in `directory`
// (".<name>.safetensors.tmp.<pid>" whose process is gone, or that carry this process's id);
// returns their paths.
std::vector<std::string> remove_stale_checkpoint_temporaries(const std::string& directory);

struct ResumePoint {
  int64_t epoch = 0;          // epochs finished
  int64_t step_in_epoch = 0;  // steps finished in the epoch after those
  int64_t global_step = 0;
};

// Where a checkpoint's run stopped, with every field of its training state checked: "epoch",
// "step_in_epoch" and "global_step" present, integers in [0, 2^40]; "global_step" equal to the
// tensor "optimizer.global_step" (one i64); no NaN or infinity in any floating tensor. FileError
// naming the file and the field otherwise.
ResumePoint read_training_state(const Checkpoint& checkpoint);

// read_training_state + load_param_into_net (strict) + load_optimizer_state; returns where training
// stopped, for Model::train's initial_epoch / initial_step. Everything is validated before any
// value is copied (optimizer state must match the optimizer's dtypes and shapes).
ResumePoint resume_from_checkpoint(const std::string& path, nn::Cell& net,
                                   optim::Optimizer& optimizer);

}  // namespace kiln::train
