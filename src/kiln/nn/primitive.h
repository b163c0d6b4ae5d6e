#pragma once
// One op of a layer, as MindSpore's primitives are: the handle through which a user gives that
// op a shard strategy under SEMI_AUTO_PARALLEL.
//   dense->matmul().shard({{1, 1}, {2, 1}});   // x whole, weight [out, in] split by rows
// The layer calls its op inside run(), which tells the graph tracer the strategy
// (ops::ShardScope); without one, sharding propagation decides.
#include <utility>

#include "kiln/ops/shard_rule.h"

namespace kiln::nn {

class Primitive {
 public:
  explicit Primitive(ops::OpKind kind) : kind_(kind) {}

  // The strategy: per input of the op, how many parts each dimension is split into. Checked
  // against the op's shard rule when a graph is compiled (kiln::Error naming the op, the
  // strategy and the shapes). An empty strategy clears it.
  Primitive& shard(ops::Strategy strategy) {
    strategy_ = std::move(strategy);
    return *this;
  }
  const ops::Strategy& strategy() const { return strategy_; }
  ops::OpKind kind() const { return kind_; }

  // Calls f() with the strategy in effect for this op's kind.
  template <class F>
  auto run(F&& f) const {
    if (strategy_.empty()) return f();
    ops::ShardScope scope(kind_, strategy_);
    return f();
  }

 private:
  ops::OpKind kind_;
  ops::Strategy strategy_;
};

}  // namespace kiln::nn
