#pragma once
// The parts of one batch that batch norm kernels normalize at the same time in different places,
// each kernel holding one part: the slices of a batch-split step on the threads of a ThreadGroup
// (BatchNormAttrs::batch_slices, train/batch_split_step.h), or the shards of a data-parallel job
// on its ranks (BatchNormAttrs::sync_ranks, nn::SyncBatchNorm). The kernels combine the parts'
// statistics through it (forward: rows, mean and variance; backward: the gradient's sums), so
// every part normalizes with the whole batch's.
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kiln/ops/attrs.h"

namespace kiln::ops {

class BatchParts {
 public:
  virtual ~BatchParts() = default;
  // Every part's `mine`, part after part, in the same order on every part (so each combines them
  // alike, to the same bits). Every part contributes as many values, in the same sequence.
  virtual std::vector<double> all_gather(std::span<const double> mine) const = 0;
  // Whether this part writes the running statistics: a batch split's slices share one copy (the
  // first slice writes it), each rank has its own.
  virtual bool updates_running_statistics() const = 0;
};

// The parts a batch norm kernel with these attributes combines its statistics across (their
// batch_slices and sync_ranks): null in eval or where the kernel has the whole batch. For
// slices, the calling thread must be a member of a ThreadGroup of batch_slices threads;
// otherwise, and for both at once, an Error naming `op`.
std::unique_ptr<BatchParts> batch_parts(std::string_view op, const BatchNormAttrs& attrs);

}  // namespace kiln::ops
