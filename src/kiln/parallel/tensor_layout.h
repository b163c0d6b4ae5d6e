#pragma once
// A tensor's layout across the ranks of a job, MindSpore's way: a device matrix (the ranks
// arranged as a row-major grid, one axis per independent split) and a tensor map (for each
// dimension of the tensor, the device-matrix axis that splits it, or none: replicated along the
// other axes), plus the axes over which each rank holds only a partial sum.
//
// An op's shard rule (ops/shard_rule.h) gives its own device matrix, which may use fewer ranks
// than the job: the rest repeat the computation, as a leading "repeat" axis (MindSpore's
// repeated calculation). Layouts of different ops may therefore use different matrices; they are
// compared by what each rank holds (block_of, partial_group), never by their matrices.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/shape.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::parallel {

struct TensorLayout {
  Shape shape;                         // the whole tensor's
  std::vector<int64_t> device_matrix;  // product = the job's ranks
  std::vector<int> tensor_map;         // per dimension: axis of device_matrix or ops::kNotSplit
  std::vector<int> partial;            // axes over which each rank's data is a partial sum

  // Every rank holds the whole tensor, summed.
  static TensorLayout replicated(const Shape& shape, int64_t ranks);
  // Input `index` (or output `index` with `output`) of an op in `form`, in a job of `ranks`:
  // the form's device matrix after a repeat axis of ranks / (its product), when that is > 1.
  static TensorLayout of_form(const ops::ShardedForm& form, bool output, size_t index,
                              const Shape& shape, int64_t ranks);

  int64_t ranks() const;
  // Parts per dimension.
  std::vector<int64_t> parts() const;
  // Rank r's coordinates in the device matrix.
  std::vector<int64_t> coordinates(int64_t rank) const;
  // Which block of each dimension rank r holds.
  std::vector<int64_t> block_of(int64_t rank) const;
  // The ranks whose partial sums add up to rank r's value (r alone when not partial), ascending.
  std::vector<int64_t> partial_group(int64_t rank) const;
  // The shape each rank holds.
  Shape local_shape() const;
  bool is_partial() const { return !partial.empty(); }
  bool is_replicated() const;
  // Whether every rank holds the same data under both layouts (same blocks, same partial groups).
  bool same_placement(const TensorLayout& other) const;
  // "split (1, 2) over device matrix [2, 2] map [-1, 1]", "replicated", "... partial over axis 0".
  std::string str() const;
};

}  // namespace kiln::parallel
