#pragma once
// AUTO_PARALLEL's dynamic-programming search (MindSpore's "dynamic_programming" mode, the OptCNN
// lineage): the cost graph is reduced one node at a time, each reduction keeping, for every
// strategy of the nodes that remain, the best strategy of the node it removes:
//   - merge / contract: a node with one neighbour folds into it (MindSpore's merge elimination
//     for a node with no inputs, contract elimination for one with no outputs);
//   - operator: a node with two neighbours becomes an edge between them (u - v - w => u - w);
//     when u and w were already joined this is MindSpore's triangle elimination;
//   - edge: two edges between the same nodes become one (their costs add).
// Each of these is exact: the optimum of the reduced graph is the optimum of the original. A
// series-parallel graph (chains, branches that join again, residual blocks, attention's three
// projections) reduces to single nodes, whose best strategies are then read off, and the
// reductions are undone in reverse to give every node its strategy.
//
// Where no node has two neighbours or fewer, the search conditions on the node with the most
// neighbours (each of its strategies in turn: removed, its edges folded into its neighbours)
// and reduces again; it stays exact while the conditioned branches fit a budget, beyond which
// only each conditioned node's best few strategies are tried (`exact` then says false).
#include <cstdint>
#include <vector>

#include "kiln/parallel/cost_graph.h"

namespace kiln::parallel {

struct SearchStatistics {
  int64_t merge = 0, contract = 0, operator_eliminations = 0, triangle = 0, edge = 0;
  int64_t conditioned = 0;  // nodes conditioned on where nothing else applied
};

struct SearchResult {
  std::vector<int> choice;  // per node: its strategy
  double cost = 0;          // CostGraph::total(choice)
  bool exact = true;
  SearchStatistics statistics;
};

SearchResult search_dynamic_programming(const CostGraph& graph);
// recursive_programming's greedy: nodes in `order`, each taking the strategy that costs least
// with the nodes decided before it (`exact` is false). One pass over the edges.
SearchResult search_greedy(const CostGraph& graph, const std::vector<int>& order);
// Every combination of strategies (tests, and graphs small enough to enumerate). Throws
// kiln::Error when the combinations exceed `limit`.
SearchResult search_exhaustive(const CostGraph& graph, double limit = 5e7);

}  // namespace kiln::parallel
