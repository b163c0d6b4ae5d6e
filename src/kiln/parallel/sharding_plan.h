#pragma once
// SEMI_AUTO_PARALLEL's plan for one logical graph (whole shapes, as one process would run it):
// every op's strategy, its inputs' and outputs' layouts, and what each value is held as.
//
// Strategies the user gave (graph::Node::strategy) are kept, after checking them against the
// op's shard rule. The others follow by sharding propagation (MindSpore's
// "sharding_propagation"): from the ops already decided, outward in both directions, each
// undecided neighbour takes, among the strategies its rule derives from its decided neighbours'
// splits, the one whose redistributions cost least under the α-β model. Ops nothing reaches run
// replicated; ops without a shard rule run replicated and the plan gives their reason.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/graph/ir.h"
#include "kiln/parallel/comm_cost.h"
#include "kiln/parallel/redistribution.h"
#include "kiln/parallel/tensor_layout.h"

namespace kiln::parallel {

struct OpPlan {
  enum class Source { user, searched, propagated, unreached, no_rule };
  ops::Strategy strategy;
  Source source = Source::unreached;
  std::string why;  // in words: whose split it follows, or why it runs replicated
  ops::ShardedForm form;
  std::vector<TensorLayout> inputs, outputs;
  ops::Cost cost_per_rank;
};

// A redistribution a rank inserts in front of one input of one op.
struct InsertedRedistribution {
  graph::NodeId op = -1;
  size_t input = 0;
  Redistribution redistribution;
};

struct ShardingPlan {
  int64_t ranks = 1;
  std::vector<std::optional<OpPlan>> ops;  // by NodeId; empty for dead nodes
  // What each value is held as: an op output as its op makes it, a parameter as its first
  // consumer wants it (each rank keeps only that block), graph inputs and constants whole.
  std::vector<std::optional<TensorLayout>> held;

  // Per op: the strategy and where it came from, the output layouts, the redistributions rank
  // `rank` inserts in front of it, and its compute per rank; then the parameters' layouts.
  std::string str(const graph::Graph& g, int64_t rank = 0, const CommCostModel& model = {}) const;
  // The redistributions rank `rank` inserts in the forward, in schedule order (the backward
  // mirrors each: graph autodiff differentiates the inserted ops).
  std::vector<InsertedRedistribution> redistributions(const graph::Graph& g, int64_t rank = 0,
                                                      const CommCostModel& model = {}) const;
};

// Plans `g` for `ranks` ranks. `fixed`: values whose layout is already decided (parameters a
// previous compile sharded, or AUTO_PARALLEL's search chose). `searched`: the nodes whose
// Node::strategy AUTO_PARALLEL's search set, with why (they are kept like the user's). Throws
// kiln::Error naming the op, the strategy and the shapes for a strategy its rule refuses.
ShardingPlan plan_sharding(const graph::Graph& g, int64_t ranks,
                           const std::map<graph::ValueId, TensorLayout>& fixed = {},
                           const CommCostModel& model = {},
                           const std::map<graph::NodeId, std::string>& searched = {});

}  // namespace kiln::parallel
