#pragma once
// Collectives as ops: eager mode runs them, graph mode traces and schedules them, and their
// gradient rules let autodiff go through them. Kernels call the communicator (comm/).
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::ops {

enum class CollectiveReduction : int64_t { mean = 0, sum = 1 };

// `group`: the ranks taking part, ascending (comm::Group); empty: every rank.
//
// Every rank's x reduced over the ranks (same shape). Gradient: the same all_reduce of the
// output's gradient.
Tensor all_reduce(const Tensor& x, CollectiveReduction reduction = CollectiveReduction::sum,
                  const std::vector<int64_t>& group = {});
// Rank `root`'s x on every rank. Gradient: the sum of every rank's gradient, on the root only.
Tensor broadcast(const Tensor& x, int root = 0);
// Every rank's x concatenated along dimension `axis`, in rank order. Gradient: reduce_scatter.
Tensor all_gather(const Tensor& x, int64_t axis = 0, const std::vector<int64_t>& group = {});
// The sum over ranks of x (dimension `axis` a multiple of the rank count), split along that
// dimension; this rank keeps its block. Gradient: all_gather.
Tensor reduce_scatter(const Tensor& x, int64_t axis = 0, const std::vector<int64_t>& group = {});
// MindSpore's AlltoAll: x (dimension `split_axis` a multiple of the group's size) split along
// `split_axis` into one block per rank, block j sent to the group's j-th rank; the blocks
// received concatenated along `concat_axis` in the group's order. Moves a split from one
// dimension to another sending each rank's block once, where all_gather then a slice would send
// every block to every rank. Gradient: all_to_all back (the axes swapped).
Tensor all_to_all(const Tensor& x, int64_t split_axis, int64_t concat_axis,
                  const std::vector<int64_t>& group = {});
// Waits until every rank reaches it; returns the number of ranks (an i32 scalar).
Tensor barrier();

// Data parallelism's gradient buckets, split in two so that the reduction runs while the
// backward goes on. The start copies its f32 inputs (flattened, in order, each multiplied by
// `prescale`) into one buffer and starts an asynchronous sum over the ranks; the wait blocks
// until that sum is done and returns it. Between them the buffer belongs to the communicator.
Tensor all_reduce_bucket_start(const std::vector<Tensor>& grads, double prescale);
Tensor all_reduce_bucket_wait(const Tensor& bucket);

}  // namespace kiln::ops
