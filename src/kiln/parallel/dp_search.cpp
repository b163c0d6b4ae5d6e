#include "kiln/parallel/dp_search.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <numeric>

#include "kiln/core/error.h"

namespace kiln::parallel {
namespace {

// Conditioned branches tried in all (each a reduction of what remains) before only the best few
// strategies of a conditioned node are tried.
constexpr int64_t kBranchBudget = 512;

// The graph as the reductions change it.
struct Work {
  struct Edge {
    int a, b;
    std::vector<double> cost;  // [sa * strategies(b) + sb]
    bool alive = true;
  };
  std::vector<size_t> count;  // strategies per node (never changes)
  std::vector<std::vector<double>> cost;
  std::vector<bool> alive;
  std::vector<Edge> edges;
  std::vector<std::vector<int>> incident;  // edge ids; dead ones are dropped as they are seen

  explicit Work(const CostGraph& g) {
    for (const CostGraph::Node& n : g.nodes) {
      count.push_back(n.cost.size());
      cost.push_back(n.cost);
      alive.push_back(true);
    }
    incident.resize(g.nodes.size());
    for (const CostGraph::Edge& e : g.edges) add_edge(e.a, e.b, e.cost, nullptr);
  }

  // The live edges at v (and drops the dead ones from its list).
  const std::vector<int>& live_edges(int v) {
    auto& list = incident[size_t(v)];
    list.erase(
        std::remove_if(list.begin(), list.end(), [&](int e) { return !edges[size_t(e)].alive; }),
        list.end());
    return list;
  }
  int other(const Edge& e, int v) const { return e.a == v ? e.b : e.a; }
  // The edge's costs as a [strategies(from)][strategies(to)] matrix.
  std::vector<double> oriented(const Edge& e, int from) const {
    if (e.a == from) return e.cost;
    const size_t na = count[size_t(e.a)], nb = count[size_t(e.b)];
    std::vector<double> t(na * nb);
    for (size_t i = 0; i < na; ++i) {
      for (size_t j = 0; j < nb; ++j) t[j * na + i] = e.cost[i * nb + j];
    }
    return t;
  }
  // Adds an edge a - b, or adds its costs to the live edge already joining them (returns true).
  bool add_edge(int a, int b, const std::vector<double>& cost, SearchStatistics* stats) {
    for (int id : live_edges(a)) {
      Edge& e = edges[size_t(id)];
      if (other(e, a) != b) continue;
      const std::vector<double> add =
          e.a == a ? cost : Work::transpose(cost, count[size_t(a)], count[size_t(b)]);
      for (size_t i = 0; i < e.cost.size(); ++i) e.cost[i] += add[i];
      if (stats) ++stats->edge;
      return true;
    }
    edges.push_back({a, b, cost});
    incident[size_t(a)].push_back(int(edges.size()) - 1);
    incident[size_t(b)].push_back(int(edges.size()) - 1);
    return false;
  }
  static std::vector<double> transpose(const std::vector<double>& m, size_t rows, size_t cols) {
    std::vector<double> t(m.size());
    for (size_t i = 0; i < rows; ++i) {
      for (size_t j = 0; j < cols; ++j) t[j * rows + i] = m[i * cols + j];
    }
    return t;
  }
};

// One reduction, to be undone in reverse: v's best strategy for each strategy of u (one
// neighbour) or of u and w (two neighbours).
struct Record {
  int v = -1, u = -1, w = -1;
  std::vector<int> best;  // [su] or [su * strategies(w) + sw]
};

struct Solution {
  double cost = kInfiniteCost;
  std::vector<Record> records;
  std::vector<std::pair<int, int>> fixed;  // (node, strategy): conditioned and last nodes
  bool exact = true;
  SearchStatistics statistics;
};

void fold_into_neighbour(Work& g, int v, int edge_id, Solution& s) {
  Work::Edge& e = g.edges[size_t(edge_id)];
  const int u = g.other(e, v);
  const std::vector<double> m = g.oriented(e, u);  // [su][sv]
  const size_t nu = g.count[size_t(u)], nv = g.count[size_t(v)];
  Record r{v, u, -1, std::vector<int>(nu, 0)};
  const std::vector<double>& cv = g.cost[size_t(v)];
  for (size_t su = 0; su < nu; ++su) {
    double best = kInfiniteCost;
    for (size_t sv = 0; sv < nv; ++sv) {
      const double c = m[su * nv + sv] + cv[sv];
      if (c < best) {
        best = c;
        r.best[su] = int(sv);
      }
    }
    g.cost[size_t(u)][su] += best;
  }
  // The edge runs from producer (a) to consumer (b): v with no other input is merged into its
  // consumer; v with no other output is contracted into its producer.
  ++(e.a == v ? s.statistics.merge : s.statistics.contract);
  e.alive = false;
  g.alive[size_t(v)] = false;
  s.records.push_back(std::move(r));
}

void eliminate_between(Work& g, int v, int e1, int e2, Solution& s) {
  const int u = g.other(g.edges[size_t(e1)], v), w = g.other(g.edges[size_t(e2)], v);
  const std::vector<double> left = g.oriented(g.edges[size_t(e1)], u);   // [su][sv]
  const std::vector<double> right = g.oriented(g.edges[size_t(e2)], v);  // [sv][sw]
  const size_t nu = g.count[size_t(u)], nv = g.count[size_t(v)], nw = g.count[size_t(w)];
  const std::vector<double>& cv = g.cost[size_t(v)];
  std::vector<double> joined(nu * nw, kInfiniteCost);
  Record r{v, u, w, std::vector<int>(nu * nw, 0)};
  for (size_t su = 0; su < nu; ++su) {
    double* out = &joined[su * nw];
    int* arg = &r.best[su * nw];
    for (size_t sv = 0; sv < nv; ++sv) {
      const double base = left[su * nv + sv] + cv[sv];
      if (base == kInfiniteCost) continue;
      const double* row = &right[sv * nw];
      for (size_t sw = 0; sw < nw; ++sw) {
        const double c = base + row[sw];
        if (c < out[sw]) {
          out[sw] = c;
          arg[sw] = int(sv);
        }
      }
    }
  }
  g.edges[size_t(e1)].alive = false;
  g.edges[size_t(e2)].alive = false;
  g.alive[size_t(v)] = false;
  const bool joined_existing = g.add_edge(u, w, joined, nullptr);
  ++(joined_existing ? s.statistics.triangle : s.statistics.operator_eliminations);
  s.records.push_back(std::move(r));
}

// Reduces g as far as the exact eliminations go; then conditions (recursively) where needed.
Solution solve(Work g, int64_t& branches) {
  Solution s;
  std::deque<int> queue(g.count.size());
  std::iota(queue.begin(), queue.end(), 0);
  while (!queue.empty()) {
    const int v = queue.front();
    queue.pop_front();
    if (!g.alive[size_t(v)]) continue;
    const std::vector<int> edges = g.live_edges(v);
    if (edges.size() == 1) {
      const int u = g.other(g.edges[size_t(edges[0])], v);
      fold_into_neighbour(g, v, edges[0], s);
      queue.push_back(u);
    } else if (edges.size() == 2) {
      const int u = g.other(g.edges[size_t(edges[0])], v);
      const int w = g.other(g.edges[size_t(edges[1])], v);
      eliminate_between(g, v, edges[0], edges[1], s);
      queue.push_back(u);
      queue.push_back(w);
    }
  }

  // Nodes left with no neighbour take their best strategy; the others need conditioning.
  double cost = 0;
  int widest = -1;
  size_t widest_degree = 0;
  for (size_t v = 0; v < g.count.size(); ++v) {
    if (!g.alive[v]) continue;
    const size_t degree = g.live_edges(int(v)).size();
    if (degree == 0) {
      const auto& c = g.cost[v];
      const auto best = std::min_element(c.begin(), c.end());
      s.fixed.emplace_back(int(v), int(best - c.begin()));
      cost += *best;
    } else if (degree > widest_degree) {
      widest = int(v);
      widest_degree = degree;
    }
  }
  if (widest < 0) {
    s.cost = cost;
    return s;
  }

  // Condition on the node with the most neighbours: each strategy in turn (the cheapest first).
  const size_t n = g.count[size_t(widest)];
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return g.cost[size_t(widest)][size_t(a)] < g.cost[size_t(widest)][size_t(b)];
  });
  size_t tries = n;
  if (branches + int64_t(n) > kBranchBudget) {
    tries = size_t(std::max<int64_t>(1, std::min<int64_t>(int64_t(n), kBranchBudget - branches)));
    if (tries < n) s.exact = false;
  }
  branches += int64_t(tries);
  Solution best;
  int best_strategy = -1;
  for (size_t t = 0; t < tries; ++t) {
    const int sv = order[t];
    Work branch = g;
    for (int id : branch.live_edges(widest)) {
      Work::Edge& e = branch.edges[size_t(id)];
      const int u = branch.other(e, widest);
      const std::vector<double> m = branch.oriented(e, widest);  // [sv][su]
      const size_t nu = branch.count[size_t(u)];
      for (size_t su = 0; su < nu; ++su) branch.cost[size_t(u)][su] += m[size_t(sv) * nu + su];
      e.alive = false;
    }
    branch.alive[size_t(widest)] = false;
    for (const auto& [node, _] : s.fixed) branch.alive[size_t(node)] = false;
    Solution sub = solve(std::move(branch), branches);
    sub.cost += g.cost[size_t(widest)][size_t(sv)];
    if (best_strategy < 0 || sub.cost < best.cost) {
      best = std::move(sub);
      best_strategy = sv;
    }
  }
  s.cost = cost + best.cost;
  s.exact = s.exact && best.exact;
  s.records.insert(s.records.end(), best.records.begin(), best.records.end());
  s.fixed.insert(s.fixed.end(), best.fixed.begin(), best.fixed.end());
  s.fixed.emplace_back(widest, best_strategy);
  SearchStatistics& st = s.statistics;
  const SearchStatistics& b = best.statistics;
  st.merge += b.merge;
  st.contract += b.contract;
  st.operator_eliminations += b.operator_eliminations;
  st.triangle += b.triangle;
  st.edge += b.edge;
  st.conditioned += b.conditioned + 1;
  return s;
}

}  // namespace

SearchResult search_dynamic_programming(const CostGraph& graph) {
  Work work(graph);
  SearchStatistics parallel_edges;
  // Edges given twice between the same nodes were merged as the work graph was built.
  parallel_edges.edge = int64_t(graph.edges.size()) - int64_t(work.edges.size());
  int64_t branches = 0;
  Solution s = solve(std::move(work), branches);
  SearchResult result;
  result.choice.assign(graph.nodes.size(), -1);
  for (const auto& [node, strategy] : s.fixed) result.choice[size_t(node)] = strategy;
  for (auto r = s.records.rbegin(); r != s.records.rend(); ++r) {
    const int su = result.choice[size_t(r->u)];
    if (r->w < 0) {
      result.choice[size_t(r->v)] = r->best[size_t(su)];
    } else {
      const int sw = result.choice[size_t(r->w)];
      result.choice[size_t(r->v)] = r->best[size_t(su) * graph.strategies(r->w) + size_t(sw)];
    }
  }
  result.cost = graph.total(result.choice);
  result.exact = s.exact;
  result.statistics = s.statistics;
  result.statistics.edge += parallel_edges.edge;
  return result;
}

SearchResult search_greedy(const CostGraph& graph, const std::vector<int>& order) {
  const size_t n = graph.nodes.size();
  std::vector<std::vector<int>> incident(n);
  for (size_t e = 0; e < graph.edges.size(); ++e) {
    incident[size_t(graph.edges[e].a)].push_back(int(e));
    incident[size_t(graph.edges[e].b)].push_back(int(e));
  }
  SearchResult result;
  result.choice.assign(n, -1);
  result.exact = false;
  auto decide = [&](int v) {
    if (result.choice[size_t(v)] >= 0) return;
    std::vector<double> cost = graph.nodes[size_t(v)].cost;
    for (int id : incident[size_t(v)]) {
      const CostGraph::Edge& e = graph.edges[size_t(id)];
      const int u = e.a == v ? e.b : e.a;
      const int su = result.choice[size_t(u)];
      if (su < 0) continue;
      const size_t nb = graph.strategies(e.b);
      for (size_t s = 0; s < cost.size(); ++s) {
        cost[s] += e.a == v ? e.cost[s * nb + size_t(su)] : e.cost[size_t(su) * nb + s];
      }
    }
    result.choice[size_t(v)] = int(std::min_element(cost.begin(), cost.end()) - cost.begin());
  };
  for (int v : order) decide(v);
  for (size_t v = 0; v < n; ++v) decide(int(v));
  result.cost = graph.total(result.choice);
  return result;
}

SearchResult search_exhaustive(const CostGraph& graph, double limit) {
  double combinations = 1;
  for (size_t v = 0; v < graph.nodes.size(); ++v) combinations *= double(graph.strategies(int(v)));
  if (combinations > limit) {
    throw Error(
        detail::concat("exhaustive search: ", combinations, " combinations exceed ", limit));
  }
  SearchResult best;
  best.cost = kInfiniteCost;
  std::vector<int> choice(graph.nodes.size(), 0);
  while (true) {
    const double c = graph.total(choice);
    if (c < best.cost) {
      best.cost = c;
      best.choice = choice;
    }
    size_t v = 0;
    while (v < choice.size() && ++choice[v] == int(graph.strategies(int(v)))) choice[v++] = 0;
    if (v == choice.size()) break;
  }
  return best;
}

}  // namespace kiln::parallel
