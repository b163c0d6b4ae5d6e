// The dynamic-programming search against brute force: on cost graphs small enough to enumerate
// every combination of strategies, it must find the same optimum cost, on chains, trees,
// branches that join again (series-parallel), and graphs that are not series-parallel (where it
// conditions); and its choice must cost what it claims.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/parallel/dp_search.h"

namespace kiln::parallel::dp_search_test {
namespace {

// A cost graph over `edges` with random costs; strategies per node from 1 to `most`.
CostGraph random_graph(int nodes, const std::vector<std::pair<int, int>>& edges, int most,
                       uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> count(1, most);
  // Costs of varied magnitude, some ties and some infinite pairs (unsupported redistributions).
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  std::uniform_int_distribution<int> kind(0, 19);
  CostGraph g;
  for (int v = 0; v < nodes; ++v) {
    std::vector<double> c(size_t(count(gen)));
    for (double& x : c) x = kind(gen) == 0 ? 1.0 : cost(gen);
    g.add_node(c, "n" + std::to_string(v));
  }
  for (const auto& [a, b] : edges) {
    std::vector<double> c(g.strategies(a) * g.strategies(b));
    for (double& x : c) {
      const int k = kind(gen);
      x = k == 0 ? std::numeric_limits<double>::infinity() : k == 1 ? 0.0 : cost(gen);
    }
    g.add_edge(a, b, c);
  }
  return g;
}

void expect_optimal(const CostGraph& g, const std::string& what, bool expect_exact = true) {
  const SearchResult dp = search_dynamic_programming(g);
  const SearchResult brute = search_exhaustive(g);
  ASSERT_EQ(dp.choice.size(), g.nodes.size()) << what;
  for (size_t v = 0; v < dp.choice.size(); ++v) {
    ASSERT_GE(dp.choice[v], 0) << what << " node " << v;
    ASSERT_LT(size_t(dp.choice[v]), g.strategies(int(v))) << what << " node " << v;
  }
  EXPECT_DOUBLE_EQ(dp.cost, g.total(dp.choice)) << what;
  if (std::isinf(brute.cost)) {
    EXPECT_TRUE(std::isinf(dp.cost)) << what;
  } else {
    EXPECT_NEAR(dp.cost, brute.cost, 1e-9 * std::max(1.0, brute.cost)) << what;
  }
  if (expect_exact) {
    EXPECT_TRUE(dp.exact) << what;
  }
}

TEST(DpSearch, ChainsUseOperatorEliminationsAndFindTheOptimum) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const int n = 2 + int(seed % 6);
    std::vector<std::pair<int, int>> edges;
    for (int v = 0; v + 1 < n; ++v) edges.emplace_back(v, v + 1);
    const CostGraph g = random_graph(n, edges, 5, seed);
    expect_optimal(g, "chain seed " + std::to_string(seed));
    const SearchResult r = search_dynamic_programming(g);
    EXPECT_EQ(r.statistics.conditioned, 0);
    EXPECT_EQ(r.statistics.merge + r.statistics.contract + r.statistics.operator_eliminations,
              n - 1);
  }
}

TEST(DpSearch, TreesFoldLeavesIntoTheirNeighbours) {
  // A root with three branches, one of them two deep; a parameter-like source feeding node 2.
  const std::vector<std::pair<int, int>> edges = {{0, 1}, {0, 2}, {0, 3}, {3, 4}, {5, 2}};
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const CostGraph g = random_graph(6, edges, 4, 100 + seed);
    expect_optimal(g, "tree seed " + std::to_string(seed));
    const SearchResult r = search_dynamic_programming(g);
    EXPECT_GT(r.statistics.merge + r.statistics.contract, 0);
    EXPECT_EQ(r.statistics.conditioned, 0);
  }
}

TEST(DpSearch, ResidualBlocksAndAttentionBranchesAreSeriesParallel) {
  // x(0) -> ln(1) -> q(2), k(3), v(4); q,k -> scores(5) -> softmax(6); softmax,v -> attend(7)
  // -> proj(8) -> add(9) <- x; parameters 10 and 11 read by 2 and 8; two edges 0 -> 9.
  std::vector<std::pair<int, int>> edges = {{0, 1}, {1, 2}, {1, 3},  {1, 4},  {2, 5},
                                            {3, 5}, {5, 6}, {6, 7},  {4, 7},  {7, 8},
                                            {8, 9}, {0, 9}, {10, 2}, {11, 8}, {0, 9}};
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const CostGraph g = random_graph(12, edges, 3, 200 + seed);
    expect_optimal(g, "attention seed " + std::to_string(seed));
    const SearchResult r = search_dynamic_programming(g);
    EXPECT_EQ(r.statistics.conditioned, 0) << "seed " << seed;
    EXPECT_GT(r.statistics.edge, 0);
    EXPECT_GT(r.statistics.triangle, 0);
  }
  // One parameter read by both projections (tied weights) closes a cycle through the block
  // that no elimination undoes: the search conditions on it and stays exact.
  edges.pop_back();
  edges.emplace_back(10, 8);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const CostGraph g = random_graph(12, edges, 3, 250 + seed);
    expect_optimal(g, "tied attention seed " + std::to_string(seed));
  }
}

TEST(DpSearch, GraphsThatAreNotSeriesParallelAreConditionedAndStayExact) {
  // K4 (every node has three neighbours) and a 2x3 grid with both diagonals of one square.
  const std::vector<std::pair<int, int>> k4 = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  const std::vector<std::pair<int, int>> grid = {{0, 1}, {1, 2}, {3, 4}, {4, 5}, {0, 3},
                                                 {1, 4}, {2, 5}, {0, 4}, {1, 3}};
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const CostGraph a = random_graph(4, k4, 4, 300 + seed);
    expect_optimal(a, "K4 seed " + std::to_string(seed));
    EXPECT_GE(search_dynamic_programming(a).statistics.conditioned, 1);
    const CostGraph b = random_graph(6, grid, 3, 400 + seed);
    expect_optimal(b, "grid seed " + std::to_string(seed));
  }
}

TEST(DpSearch, RandomGraphsMatchBruteForce) {
  std::mt19937_64 gen(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 3 + trial % 6;
    std::vector<std::pair<int, int>> edges;
    std::uniform_int_distribution<int> node(0, n - 1);
    const int m = n - 1 + int(gen() % size_t(n));
    for (int e = 0; e < m; ++e) {
      const int a = node(gen), b = node(gen);
      if (a != b) edges.emplace_back(std::min(a, b), std::max(a, b));
    }
    expect_optimal(random_graph(n, edges, 4, 500 + uint64_t(trial)),
                   "random trial " + std::to_string(trial));
  }
}

TEST(DpSearch, DisconnectedNodesTakeTheirOwnBest) {
  CostGraph g;
  g.add_node({3, 1, 2});
  g.add_node({5});
  const SearchResult r = search_dynamic_programming(g);
  EXPECT_EQ(r.choice, (std::vector<int>{1, 0}));
  EXPECT_DOUBLE_EQ(r.cost, 6);
}

TEST(DpSearch, BadGraphsAreRefusedByName) {
  CostGraph g;
  g.add_node({1, 2}, "a");
  g.add_node({1}, "b");
  EXPECT_THROW(g.add_edge(0, 0, {1, 1}), Error);
  EXPECT_THROW(g.add_edge(0, 2, {1, 1}), Error);
  EXPECT_THROW(g.add_edge(0, 1, {1, 1, 1}), Error);
  EXPECT_THROW(g.add_node({}, "empty"), Error);
  CostGraph big;
  for (int v = 0; v < 40; ++v) big.add_node(std::vector<double>(8, 1.0));
  EXPECT_THROW(search_exhaustive(big), Error);
}

}  // namespace
}  // namespace kiln::parallel::dp_search_test
