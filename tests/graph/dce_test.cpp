#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::dce_test {
namespace {
using namespace testing;

TEST(DeadCodeElimination, RemovesUnusedNodesKeepsOutputsAndSideEffects) {
  Tensor p = random_tensor({4}, 1), lr = Tensor::scalar(0.1);
  Graph g;
  {
    Tracer tracer(g);
    Tensor x = tracer.input({Shape{4}, DType::f32}, "x");
    ops::exp(x);  // unused
    Tensor y = ops::relu(ops::neg(x));
    ops::sgd_update(p, x, lr, 0.0);  // no outputs, but writes p: must stay
    tracer.add_output(y);
    tracer.finish();
  }
  EXPECT_EQ(g.num_live_nodes(), 4u);
  EXPECT_EQ(passes::eliminate_dead_code(g), 1);
  EXPECT_EQ(g.num_live_nodes(), 3u);
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::exp)), 0);
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::sgd_update)), 1);
  EXPECT_EQ(passes::eliminate_dead_code(g), 0);  // idempotent
}

TEST(DeadCodeElimination, RemovesWholeDeadChains) {
  Graph g = trace(
      [](const std::vector<Tensor>& in) {
        Tensor dead = ops::sqrt(ops::abs(ops::exp(in[0])));
        (void)dead;
        return std::vector<Tensor>{ops::neg(in[0])};
      },
      {random_tensor({3}, 1)});
  EXPECT_EQ(passes::eliminate_dead_code(g), 3);
  EXPECT_EQ(g.num_live_nodes(), 1u);
}

}  // namespace
}  // namespace kiln::graph::dce_test
