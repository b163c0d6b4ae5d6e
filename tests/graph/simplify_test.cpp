#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"
#include "kiln/ops/cpu_support.h"
#include "testing/cpu_features.h"

namespace kiln::graph::simplify_test {
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

// Mixed precision: a bf16 layer's weight gradient goes into momentum SGD through a cast to f32;
// the cast is dropped and the update reads the bf16 gradient, widening it exactly as the cast
// did, so the parameters match an eager step's.
TEST(AlgebraicSimplification, UpdatesReadBf16GradientsWithoutTheCast) {
  if (!ops::arithmetic_available(DType::bf16)) GTEST_SKIP() << kiln::testing::kNoBf16Arithmetic;
  LossFn loss = [](const std::vector<Tensor>& p, const Tensor& x, const Tensor&) {
    Tensor h = ops::matmul(ops::cast(x, DType::bf16), ops::cast(p[0], DType::bf16));
    return ops::mean(ops::square(ops::cast(h, DType::f32)));
  };
  const Tensor x = random_tensor({16, 12}, 1), labels = random_labels(16, 4, 2);
  const Tensor lr = Tensor::scalar(0.05);
  std::vector<Tensor> params{random_tensor({12, 8}, 3)};
  std::vector<Tensor> velocities{Tensor::zeros({12, 8})};
  std::vector<Tensor> eager_params = clone_all(params);
  std::vector<Tensor> eager_velocities{Tensor::zeros({12, 8})};

  Graph g = trace_momentum_step(loss, params, velocities, x, labels, lr, 0.0, false);
  EXPECT_GE(passes::simplify_algebra(g), 1);
  passes::eliminate_dead_code(g);
  int updates = 0;
  for (NodeId n : g.schedule()) {
    const Node& node = g.node(n);
    if (node.type != NodeType::op || node.op != ops::OpKind::momentum_update) continue;
    ++updates;
    EXPECT_EQ(g.value(node.inputs[1]).meta.dtype, DType::bf16);
  }
  EXPECT_EQ(updates, 1);

  Executable exe(trace_momentum_step(loss, params, velocities, x, labels, lr, 0.0, false), {});
  exe.run(std::vector<Tensor>{x, labels});
  autograd::install_tape();
  const Tensor l = loss(eager_params, x, labels);
  const std::vector<Tensor> grads = autograd::grad(l, eager_params);
  {
    NoGradGuard no_grad;
    ops::momentum_update(eager_params[0], grads[0], eager_velocities[0], lr, 0.9, 0.0, false);
  }
  expect_all_close(params, eager_params, 1e-6, 1e-6, "parameters");
  expect_all_close(velocities, eager_velocities, 1e-6, 1e-6, "velocities");
}

}  // namespace
}  // namespace kiln::graph::simplify_test
