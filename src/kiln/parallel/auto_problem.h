#pragma once
// AUTO_PARALLEL's cost graph for one traced step (auto_parallel.h): a node per op, holding its
// candidate strategies (strategy_candidates.h) with their layouts and costs, a node per
// parameter (and buffer) holding the layouts its readers may want, and an edge per tensor read,
// priced by placement_key.h. Kept apart from the search so that every search mode, the memory
// bisection and the report price plans the same way.
#include <map>
#include <vector>

#include "kiln/graph/ir.h"
#include "kiln/parallel/auto_parallel.h"
#include "kiln/parallel/cost_graph.h"
#include "kiln/parallel/placement_key.h"
#include "kiln/parallel/tensor_layout.h"

namespace kiln::parallel {

class AutoProblem {
 public:
  // `extra_strategies`, `extra_layouts`: to weigh besides the candidates (sharding
  // propagation's choices).
  AutoProblem(const graph::Graph& g, graph::ValueId loss, int64_t devices,
              const AutoParallelOptions& options,
              const std::map<graph::ValueId, TensorLayout>& fixed,
              const std::map<graph::NodeId, ops::Strategy>& extra_strategies = {},
              const std::map<graph::ValueId, TensorLayout>& extra_layouts = {});

  int64_t devices = 1;
  CostGraph time_graph;                         // seconds per rank per step
  std::vector<std::vector<double>> node_bytes;  // [cost node][strategy]: memory per rank

  StepPrediction evaluate(const std::vector<int>& choice) const;
  // Every op splitting the batch (dim 0 of its first input) over all devices where its rule
  // allows, else whole; parameters replicated.
  std::vector<int> data_parallel_choice() const;
  // The choice that runs these strategies and holds these layouts (others: whole).
  std::vector<int> choice_of(const std::map<graph::NodeId, ops::Strategy>& strategies,
                             const std::map<graph::ValueId, TensorLayout>& layouts) const;
  // The order recursive_programming decides nodes in: ops by their whole compute, largest first,
  // then parameters.
  std::vector<int> greedy_order() const;
  // Plans each chosen redistribution exactly (plan_redistribution on the first and the last
  // rank); a pair it refuses is priced out of the graph. Returns whether any was.
  bool refuse_unsupported_edges(const std::vector<int>& choice);
  int64_t candidates() const;
  // Fills plan.ops (strategy, what, why) and plan.parameters from the choice.
  void describe(const std::vector<int>& choice, AutoPlan& plan) const;

 private:
  struct OpEntry {
    graph::NodeId id;
    int node = -1;  // in time_graph
    std::vector<ops::Strategy> strategies;
    std::vector<std::vector<TensorLayout>> inputs, outputs;  // [strategy][slot]
    std::vector<std::vector<PlacementKey>> input_keys, output_keys;
    std::vector<double> compute_s, communication_s;  // [strategy]
  };
  struct ParameterEntry {
    graph::ValueId value;
    int node = -1;
    bool trainable = false;
    std::vector<TensorLayout> layouts;
    std::vector<PlacementKey> keys;
    std::vector<double> compute_s, communication_s;  // update; gradient all-reduce
  };
  // Where an edge's tensor comes from and goes to.
  struct EdgeSource {
    int producer = -1;  // OpEntry index, or -1 for a parameter
    int output = 0;     // the producer's output
    int parameter = -1;
    int consumer = 0;  // OpEntry index
    int slot = 0;
    DType dtype = DType::f32;
  };

  const TensorLayout& edge_from(const EdgeSource& e, int strategy) const;
  const TensorLayout& edge_to(const EdgeSource& e, int strategy) const;
  bool is_compute_node(int node) const { return node < int(ops_.size()); }
  // This op's cost (node and its edges) under strategy s, the others as chosen.
  // What the nodes in `changed` and their edges cost under `choice`: seconds and bytes.
  std::pair<double, double> local_cost(const std::vector<int>& changed,
                                       const std::vector<int>& choice) const;
  int data_parallel_strategy(size_t op) const;  // -1: none

  const graph::Graph& g_;
  AutoParallelOptions options_;
  std::vector<OpEntry> ops_;
  std::vector<ParameterEntry> parameters_;
  std::vector<EdgeSource> edges_;                  // parallel to time_graph.edges
  std::vector<std::vector<int>> incident_;         // edges per cost node
  std::vector<std::vector<double>> node_compute_;  // [cost node][strategy]
};

}  // namespace kiln::parallel
