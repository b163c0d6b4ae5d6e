#pragma once
// The graph AUTO_PARALLEL's search works on: one node per op (and per parameter), each with a
// cost for each of its candidate strategies, and one edge per tensor passed between two nodes,
// with a cost for each pair of their strategies (the redistribution between the producer's
// layout and the one its consumer needs). A plan picks one strategy per node; its cost is the sum
// of its nodes' and edges' costs. The search (dp_search.h) knows nothing else: auto_parallel.h
// builds this graph from a traced step.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kiln::parallel {

// The cost of a choice that is ruled out (over the memory limit, or not a valid split).
inline constexpr double kInfiniteCost = std::numeric_limits<double>::infinity();

struct CostGraph {
  struct Node {
    std::vector<double> cost;  // per strategy
    std::string name;          // for the report ("matmul %12", "parameter fc1.weight")
  };
  struct Edge {
    int a = 0, b = 0;
    std::vector<double> cost;  // [strategy of a * strategies of b + strategy of b]
  };
  std::vector<Node> nodes;
  std::vector<Edge> edges;

  int add_node(std::vector<double> cost, std::string name = {});
  // Throws kiln::Error when a or b is not a node, a == b, or the cost has the wrong size.
  void add_edge(int a, int b, std::vector<double> cost);
  size_t strategies(int node) const { return nodes[size_t(node)].cost.size(); }
  // The cost of one strategy per node.
  double total(const std::vector<int>& choice) const;
};

}  // namespace kiln::parallel
