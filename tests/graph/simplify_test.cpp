#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph {
namespace {
using namespace testing;

TEST(AlgebraicSimplification, RemovesIdentities) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    Tensor a = ops::mul(x, Tensor::ones({2, 3}));
    Tensor b = ops::add(Tensor::zeros({2, 3}), a);
    Tensor c = ops::mul_scalar(ops::add_scalar(b, 0.0), 1.0);
    Tensor d = ops::neg(ops::neg(c));
    Tensor e = ops::reshape(ops::sum_to_shape(d, Shape{2, 3}), Shape{2, 3});
    return std::vector<Tensor>{ops::relu(e)};
  };
  std::vector<Tensor> in{random_tensor({2, 3}, 1)};
  Graph g = trace(fn, in);
  int rewrites = passes::simplify_algebra(g);
  EXPECT_GE(rewrites, 5);
  passes::eliminate_dead_code(g);
  EXPECT_EQ(g.num_live_nodes(), 1u);  // relu(x)
  Compiled c = compile_and_run(fn, in, {});
  expect_all_close(c.outputs, fn(in), 0, 0, "simplified");
}

TEST(AlgebraicSimplification, MergesScalarMultipliesAndKeepsBroadcasts) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor y = ops::mul_scalar(ops::mul_scalar(in[0], 3.0), 0.5);
    // x * ones of a larger shape broadcasts: not an identity.
    Tensor z = ops::mul(in[0], Tensor::ones({2, 3}));
    return std::vector<Tensor>{y, z};
  };
  std::vector<Tensor> in{random_tensor({3}, 1)};
  Graph g = trace(fn, in);
  passes::simplify_algebra(g);
  passes::eliminate_dead_code(g);
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::mul_scalar)), 1);
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::mul)), 1);
  Compiled c = compile_and_run(fn, in, {});
  expect_all_close(c.outputs, fn(in), 1e-6, 1e-6, "simplified");
}

}  // namespace
}  // namespace kiln::graph
