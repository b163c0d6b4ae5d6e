#pragma once
// A layout reduced to what moving a tensor out of it costs: for each dimension, which block each
// rank holds, as a mixed-radix digit of the rank (block = sum over digits of
// (rank / stride) % size * weight); and the same for the ranks whose partial sums add up.
// Comparing two keys says whether two layouts place every block on the same ranks without
// enumerating the ranks, and redistribution_seconds prices what plan_redistribution would run
// (the same steps, chosen the same way) in time independent of the job's size: AUTO_PARALLEL's
// search prices millions of layout pairs at 1,024 ranks with it.
#include <cstdint>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/shape.h"
#include "kiln/parallel/comm_cost.h"
#include "kiln/parallel/tensor_layout.h"

namespace kiln::parallel {

struct PlacementKey {
  struct Digit {
    int64_t size = 1, stride = 1;
    bool operator==(const Digit&) const = default;
  };
  using Digits = std::vector<Digit>;  // most significant first; empty: whole
  Shape shape;
  std::vector<Digits> dims;
  Digits partial;  // the partial-sum group's position; empty: not partial
  int64_t ranks = 1;

  static PlacementKey of(const TensorLayout& layout);
  int64_t parts(size_t dim) const;
  int64_t partial_ranks() const;
  bool operator==(const PlacementKey&) const = default;
};

// What plan_redistribution(from, to, ...) would take in seconds (its plans are the same on every
// rank), or infinity where `to` holds partial sums or the shapes differ.
double redistribution_seconds(const PlacementKey& from, const PlacementKey& to, DType dtype,
                              const CommCostModel& model);

}  // namespace kiln::parallel
