#pragma once
// How an op runs split across devices (SEMI_AUTO_PARALLEL), next to the op: OpDef::shard.
//
// A strategy is MindSpore's: per input, how many parts each dimension is split into, e.g.
// matmul ((2, 1), (1, 1)) splits the rows of A in two. A rule checks a strategy and says what the
// op then is, in MindSpore's terms: its device matrix (one axis per independent split, each a
// number of parts) and per input and output a tensor map (for each dimension, the device-matrix
// axis that splits it, or -1), plus which outputs hold partial sums awaiting a reduction (matmul
// split on the contracted dimension). parallel/ turns these into each rank's local graph and the
// communication between ops. Ops without a rule say why (OpDef::no_shard_reason) and run
// replicated.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln::ops {

using Strategy = std::vector<std::vector<int64_t>>;
// "((2, 1), (1, 1))"
std::string strategy_str(const Strategy& s);
// Every input unsplit (all ones), shaped for these inputs.
Strategy replicated_strategy(std::span<const TensorMeta> inputs);

inline constexpr int kNotSplit = -1;

// One op under one strategy.
struct ShardedForm {
  std::vector<int64_t> device_matrix;        // parts per axis (axis 0 first)
  std::vector<std::vector<int>> input_maps;  // per input, per dimension: axis or kNotSplit
  std::vector<std::vector<int>> output_maps;
  // Per output: the axes over which each rank's result is a partial sum (summing it over the
  // ranks along those axes gives the true value).
  std::vector<std::vector<int>> output_partial;
  // The attributes each rank's local op runs with (reshape's local target shape, ...).
  Attrs local_attrs;
  // Output 0 of the local op is multiplied by this (a mean over a split axis: each rank's mean
  // counts 1/parts of the whole).
  double output_scale = 1.0;
  // The communication this form needs, in words ("" when none).
  std::string communication;
};

struct ShardRule {
  // What the rule accepts, in words (errors and the plan print it).
  const char* accepts;
  // The op's form under `strategy`; throws ShapeError saying what the rule refuses. Called only
  // with a strategy of the right size and ranks whose parts divide their dimensions
  // (shard_form checks those first).
  ShardedForm (*form)(std::span<const TensorMeta> inputs, const Attrs& attrs,
                      const Strategy& strategy);
  // Sharding propagation: the strategy under which input `index` (or, with index -1, output 0)
  // is split into `parts` per dimension, as a neighbour already has it; nullopt when the op
  // cannot take that split (then it is gathered or split to what the op can take).
  std::optional<Strategy> (*follow)(std::span<const TensorMeta> inputs, const Attrs& attrs,
                                    int index, const std::vector<int64_t>& parts);
};

// The op's form under `strategy` for `device_num` devices. Throws ShapeError naming the op, the
// strategy and the input shapes when the strategy has the wrong number of inputs or ranks, a
// part that does not divide its dimension, more devices than device_num (or a count that does
// not divide it), or one the op's rule refuses; for an op without a rule, any split.
ShardedForm shard_form(OpKind kind, std::span<const TensorMeta> inputs, const Attrs& attrs,
                       const Strategy& strategy, int64_t device_num);
// Whether `strategy` splits nothing.
bool is_replicated(const Strategy& strategy);
// The op's cost on one rank under the strategy: OpDef::cost of the whole op divided by the
// number of shards the device matrix makes.
Cost sharded_cost(OpKind kind, std::span<const TensorMeta> inputs, const Attrs& attrs,
                  const ShardedForm& form);

// The user's strategy for the next ops of one kind called on this thread, for the tracer to
// record on their graph nodes (what nn layers' `.shard(...)` sets, around their op calls).
// Scopes may end in any order:
//   { ops::ShardScope s(OpKind::matmul, {{1, 1}, {2, 1}}); y = ops::matmul(x, w, false, true); }
class ShardScope {
 public:
  ShardScope(OpKind kind, Strategy strategy);
  ~ShardScope();
  ShardScope(const ShardScope&) = delete;
  ShardScope& operator=(const ShardScope&) = delete;

 private:
  ShardScope* previous_;
  OpKind kind_;
  Strategy strategy_;
  friend const Strategy* scoped_strategy(OpKind kind);
};
// The strategy an enclosing ShardScope sets for ops of `kind`, or null.
const Strategy* scoped_strategy(OpKind kind);

// The rules the op table's entries point to (ops/shard_rules.cpp, unless said otherwise).
extern const ShardRule kElementwiseShardRule;  // any op that maps elements one to one
extern const ShardRule kMatmulShardRule;
extern const ShardRule kSumShardRule;
extern const ShardRule kMeanShardRule;
extern const ShardRule kMaxReduceShardRule;  // max, argmax: reduced axes unsplit
extern const ShardRule kReshapeShardRule;
extern const ShardRule kTransposeShardRule;
extern const ShardRule kSoftmaxShardRule;     // softmax, log_softmax
extern const ShardRule kCausalMaskShardRule;  // the last two dims whole
extern const ShardRule kCrossEntropyShardRule;
extern const ShardRule kLayerNormShardRule;
extern const ShardRule kEmbeddingShardRule;
// ops/shard_rules_conv_net.cpp
extern const ShardRule kConv2dShardRule;
extern const ShardRule kPool2dShardRule;  // max_pool2d, avg_pool2d
extern const ShardRule kBatchNormShardRule;
// ops/shard_rules_shape.cpp
extern const ShardRule kConcatShardRule;
extern const ShardRule kSliceShardRule;  // slice, pad_slice_grad
extern const ShardRule kOneHotShardRule;
extern const ShardRule kBroadcastToShardRule;
extern const ShardRule kSumToShapeShardRule;

}  // namespace kiln::ops
