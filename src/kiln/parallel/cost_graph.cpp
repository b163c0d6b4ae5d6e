#include "kiln/parallel/cost_graph.h"

#include "kiln/core/error.h"

namespace kiln::parallel {

int CostGraph::add_node(std::vector<double> cost, std::string name) {
  if (cost.empty()) throw Error("cost graph: node '" + name + "' has no strategy");
  nodes.push_back({std::move(cost), std::move(name)});
  return int(nodes.size()) - 1;
}

void CostGraph::add_edge(int a, int b, std::vector<double> cost) {
  const int n = int(nodes.size());
  if (a < 0 || b < 0 || a >= n || b >= n || a == b) {
    throw Error(detail::concat("cost graph: edge ", a, " - ", b, " between ", n, " nodes"));
  }
  if (cost.size() != strategies(a) * strategies(b)) {
    throw Error(detail::concat("cost graph: edge ", a, " - ", b, " has ", cost.size(),
                               " costs for ", strategies(a), " x ", strategies(b), " strategies"));
  }
  edges.push_back({a, b, std::move(cost)});
}

double CostGraph::total(const std::vector<int>& choice) const {
  double sum = 0;
  for (size_t v = 0; v < nodes.size(); ++v) sum += nodes[v].cost[size_t(choice[v])];
  for (const Edge& e : edges) {
    sum += e.cost[size_t(choice[size_t(e.a)]) * strategies(e.b) + size_t(choice[size_t(e.b)])];
  }
  return sum;
}

}  // namespace kiln::parallel
