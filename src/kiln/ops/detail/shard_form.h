#pragma once
// What the shard rules (shard_rules*.cpp) build their forms with: a device-matrix axis per split,
// tensor maps, and the refusal that shard_form turns into an error naming the op.
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops::shard {

using Parts = std::vector<int64_t>;
using Map = std::vector<int>;

// A strategy the rule does not take; shard_form adds the op, the strategy, the shapes and what
// the rule accepts.
[[noreturn]] inline void refuse(const std::string& why) {
  throw ShapeError(why);
}

// Adds an axis of `parts` to the form's device matrix (none for 1 part); returns its index or
// kNotSplit.
inline int axis_for(ShardedForm& f, int64_t parts) {
  if (parts == 1) return kNotSplit;
  f.device_matrix.push_back(parts);
  return int(f.device_matrix.size()) - 1;
}

// Each dimension split as `parts`, on an axis of its own.
inline Map split_each(ShardedForm& f, const Parts& parts) {
  Map m;
  for (int64_t p : parts) m.push_back(axis_for(f, p));
  return m;
}

inline int64_t product(const Parts& p, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) n *= p[i];
  return n;
}

// `axis` counted from the end when negative.
inline size_t dim_index(int64_t axis, int rank) {
  return size_t(axis < 0 ? axis + rank : axis);
}

}  // namespace kiln::ops::shard
