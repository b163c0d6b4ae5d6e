#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::cse_test {
namespace {
using namespace testing;

TEST(CommonSubexpressions, MergesRepeatsAndKeepsResults) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor a = ops::mul(in[0], in[1]);
    Tensor b = ops::mul(in[0], in[1]);  // same as a
    Tensor c = ops::mul(in[1], in[0]);  // other operand order: a different node
    Tensor d = ops::add_scalar(in[0], 1.0), e = ops::add_scalar(in[0], 2.0);  // attrs differ
    return std::vector<Tensor>{ops::add(ops::add(a, b), ops::add(c, ops::add(d, e)))};
  };
  std::vector<Tensor> in{random_tensor({5}, 1), random_tensor({5}, 2)};
  Graph g = trace(fn, in);
  EXPECT_EQ(passes::eliminate_common_subexpressions(g), 1);
  passes::eliminate_dead_code(g);
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::mul)), 2);
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::add_scalar)), 2);
  Compiled c = compile_and_run(fn, in, {});
  expect_all_close(c.outputs, fn(in), 1e-6, 1e-6, "after CSE");
}

TEST(CommonSubexpressions, NeverMergesRandomOrStateWrittenInPlace) {
  Tensor p = random_tensor({4}, 1), lr = Tensor::scalar(0.5);
  Graph g;
  {
    Tracer tracer(g);
    Tensor x = tracer.input({Shape{4}, DType::f32}, "x");
    Tensor d1 = ops::dropout(x, 0.5, true)[0];
    Tensor d2 = ops::dropout(x, 0.5, true)[0];
    Tensor r1 = ops::mul(x, p);
    ops::sgd_update(p, x, lr, 0.0);
    Tensor r2 = ops::mul(x, p);  // reads p after the update: not the same value as r1
    tracer.add_output(ops::add(ops::add(d1, d2), ops::add(r1, r2)));
    tracer.finish();
  }
  EXPECT_EQ(passes::eliminate_common_subexpressions(g), 0);
}

}  // namespace
}  // namespace kiln::graph::cse_test
