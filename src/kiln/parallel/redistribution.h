#pragma once
// Redistribution: the collectives and local slices that turn a tensor held in one layout into
// another, for one rank of the job (every rank plans its own; the steps match across ranks).
//
// A partial sum is reduced first: a reduce_scatter along a dimension the target splits when the
// partial group is exactly that split, else an all_reduce (whichever sequence the α-β model
// finds cheaper). Then each dimension split differently from the target is all-gathered whole,
// and each dimension the target splits is sliced locally (no communication); or, where the
// target splits a dimension b exactly as the source splits another dimension a, an all_to_all
// moves the split from a to b (each rank sends its block once, where gathering a and slicing b
// would send every block to every rank: n times the bytes); the α-β model picks the cheaper. The
// backward needs nothing more: graph autodiff differentiates the inserted ops (all_gather's
// gradient is a reduce_scatter, all_to_all's the all_to_all back, a slice's a zero-padded block,
// an all_reduce's an all_reduce).
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/parallel/comm_cost.h"
#include "kiln/parallel/tensor_layout.h"

namespace kiln::parallel {

struct RedistributionStep {
  enum class Kind { all_reduce, reduce_scatter, all_gather, all_to_all, split };
  Kind kind = Kind::all_reduce;
  int64_t dim = 0;             // the tensor dimension (not for all_reduce; all_to_all: the one
                               // it splits)
  int64_t from_dim = 0;        // all_to_all: the dimension whose split it moves (made whole)
  std::vector<int64_t> group;  // this rank's group, ascending (collectives)
  int64_t parts = 1;           // split: into how many blocks
  int64_t block = 0;           // split: which block this rank keeps
  double seconds = 0;          // the α-β estimate of this step on one rank
  // "all_gather dim 1 over ranks [0, 1]"
  std::string str() const;
  // The same with the group's size for its list, for plans of many ranks: "all_gather dim 1
  // over 512 ranks".
  std::string brief() const;
};

struct Redistribution {
  std::vector<RedistributionStep> steps;
  double seconds = 0;
  bool empty() const { return steps.empty(); }
  // "all_reduce over ranks [0, 1], then split dim 0 in 2 (block 1)"; "nothing" when empty.
  std::string str() const;
  // Each step's brief(), joined the same way.
  std::string brief() const;
};

// The cheapest sequence this rank runs to go from `from` to `to` (same whole shape; `to` holds
// no partial sums). Throws Error naming both layouts when no sequence of these steps does it.
Redistribution plan_redistribution(const TensorLayout& from, const TensorLayout& to, int64_t rank,
                                   DType dtype, const CommCostModel& model = {});
// Emits the steps as ops on `x` (this rank's local tensor; traced or eager).
Tensor apply_redistribution(const Tensor& x, const Redistribution& redistribution);

}  // namespace kiln::parallel
