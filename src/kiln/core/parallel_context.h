#pragma once
// How a training job splits its work across ranks, with MindSpore's names:
//   kiln::set_auto_parallel_context({.parallel_mode = kiln::ParallelMode::DATA_PARALLEL,
//                                    .gradients_mean = true, .device_num = size});
// Model (train/) reads it to reduce gradients across ranks; data sources read it to shard by
// rank. The ranks themselves come from comm/ (kiln::communication::init).
#include <cstdint>
#include <string>

namespace kiln {

enum class ParallelMode : uint8_t { STAND_ALONE, DATA_PARALLEL, SEMI_AUTO_PARALLEL, AUTO_PARALLEL };

struct AutoParallelContext {
  ParallelMode parallel_mode = ParallelMode::STAND_ALONE;
  // Average the gradients over ranks (true) or sum them (false).
  bool gradients_mean = false;
  // Ranks in the job; 0: whatever the communicator says once initialized.
  int device_num = 0;
  // This rank; -1: the communicator's.
  int global_rank = -1;
  // Gradients are all-reduced in buckets of about this many MiB, in backward order, each as
  // soon as its last gradient exists; the first bucket is small so communication starts early.
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  // Each data source shards by rank unless the user gave num_shards (MindSpore's behaviour).
  bool dataset_shard_by_rank = true;
  // AUTO_PARALLEL: how strategies are chosen ("dynamic_programming", "recursive_programming",
  // "sharding_propagation"; parallel/auto_parallel.h) and the memory each rank may use for
  // parameters, gradients, optimizer state and activations (MiB; 0: no limit), the counterpart
  // of MindSpore's max_device_memory for the search.
  std::string search_mode = "dynamic_programming";
  double memory_limit_mb = 0;
  // AUTO_PARALLEL: how the search knows each op's time under each strategy: "measured" (its
  // forward and backward timed once at the local shapes, on rank 0) or "estimated" (its FLOPs
  // and bytes at the machine's peaks: no time spent measuring, but the many small and
  // memory-bound kernels of a step come out faster than they run).
  std::string op_times = "measured";
};

// Throws kiln::Error naming a field with a value out of range.
void set_auto_parallel_context(const AutoParallelContext& context);
const AutoParallelContext& get_auto_parallel_context();
void reset_auto_parallel_context();

// "stand_alone", "data_parallel", ... (MindSpore's strings); parse accepts "data" for
// "data_parallel" and "auto" for "auto_parallel" too and throws an Error listing the choices.
std::string parallel_mode_name(ParallelMode mode);
ParallelMode parse_parallel_mode(const std::string& name);

}  // namespace kiln
