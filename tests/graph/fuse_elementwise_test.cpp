#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::fuse_elementwise_test {
namespace {
using namespace testing;

TEST(FuseElementwise, ChainBecomesOneKernel) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor t = ops::add(ops::mul(in[0], in[1]), in[2]);  // in[2] broadcasts
    return std::vector<Tensor>{ops::sigmoid(ops::mul_scalar(ops::relu(t), 1.5))};
  };
  std::vector<Tensor> in{random_tensor({64, 33}, 1), random_tensor({64, 33}, 2),
                         random_tensor({33}, 3)};
  Compiled c = expect_fused_matches(fn, in);
  const Graph& g = c.exe->graph();
  EXPECT_EQ(g.num_live_nodes(), 1u);
  ASSERT_EQ(count_nodes(g, NodeType::fused_elementwise), 1);
  EXPECT_EQ(g.node(g.schedule()[0]).members.size(), 5u);
  EXPECT_EQ(c.exe->report().fused("elementwise"), 1);
}

TEST(FuseElementwise, ValuesWithOtherReadersAreNotSwallowed) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor shared = ops::exp(in[0]);  // read by two chains
    Tensor a = ops::neg(ops::add(shared, in[0]));
    Tensor b = ops::sqrt(ops::mul(shared, shared));
    return std::vector<Tensor>{a, b};
  };
  std::vector<Tensor> in{random_tensor({100}, 1)};
  Compiled c = expect_fused_matches(fn, in);
  const Graph& g = c.exe->graph();
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::exp)), 1);
  EXPECT_EQ(count_nodes(g, NodeType::fused_elementwise), 2);
}

TEST(FuseElementwise, ChannelsLastAndLargeTensorsTakeTheSamePath) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor y = ops::conv2d(in[0], in[1], Tensor(), {.padding = {1, 1}});  // channels-last
    return std::vector<Tensor>{ops::tanh(ops::add_scalar(ops::mul(y, y), 0.25))};
  };
  std::vector<Tensor> in{random_tensor({4, 3, 20, 20}, 1), random_tensor({8, 3, 3, 3}, 2)};
  Compiled c = expect_fused_matches(fn, in, 1e-5, 1e-4);
  EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::fused_elementwise), 1);
}

}  // namespace
}  // namespace kiln::graph::fuse_elementwise_test

namespace kiln::graph::fuse_elementwise_test {
namespace {
using namespace testing;

// The backward of a global mean pool: broadcast, scale, relu mask against a channels-last
// activation. broadcast_to joins the chain (the engine broadcasts its input), and intermediates
// of another layout than the output's fuse too (they are never stored).
TEST(FuseElementwise, BroadcastAndMixedLayoutsJoinTheChain) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor y = ops::relu(ops::conv2d(in[1], in[2], Tensor(), {}));  // channels-last [2,4,5,5]
    Tensor g = ops::broadcast_to(ops::reshape(in[0], Shape{2, 4, 1, 1}), Shape{2, 4, 5, 5});
    return std::vector<Tensor>{ops::relu_grad(ops::mul_scalar(g, 0.04), y)};
  };
  std::vector<Tensor> in{random_tensor({2, 4}, 1), random_tensor({2, 3, 5, 5}, 2),
                         random_tensor({4, 3, 1, 1}, 3)};
  Compiled c = expect_fused_matches(fn, in);
  const Graph& g = c.exe->graph();
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::broadcast_to)), 0);
  bool found = false;
  for (NodeId n : g.schedule()) {
    if (g.node(n).type == NodeType::fused_elementwise) {
      found =
          g.node(n).members == std::vector<std::string>{"broadcast_to", "mul_scalar", "relu_grad"};
    }
  }
  EXPECT_TRUE(found) << g.str();
}

}  // namespace
}  // namespace kiln::graph::fuse_elementwise_test
