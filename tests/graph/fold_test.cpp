#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::fold_test {
namespace {
using namespace testing;

// Constants reach traced ops as symbolic tensors (autodiff's seeds and zero fills do); ops
// on them are recorded, and folding evaluates them at compile time.
TEST(ConstantFolding, EvaluatesConstantSubgraphsOnce) {
  Graph g;
  {
    Tracer tracer(g);
    Tensor x = tracer.input({Shape{4}, DType::f32}, "x");
    Tensor half = tracer.tensor_of(tracer.value_of(Tensor::full({4}, 0.5)));
    Tensor k = ops::exp(ops::mul_scalar(half, 2.0));
    tracer.add_output(ops::mul(x, k));
    tracer.finish();
  }
  EXPECT_EQ(g.num_live_nodes(), 3u);
  EXPECT_EQ(passes::fold_constants(g), 2);
  EXPECT_EQ(g.num_live_nodes(), 1u);
  Executable exe(std::move(g), {.optimize = false});
  Tensor x = random_tensor({4}, 1);
  Tensor expected = ops::mul(x, ops::exp(Tensor::full({4}, 1.0)));
  expect_all_close(exe.run(std::vector<Tensor>{x}), {expected}, 1e-6, 1e-6, "folded");
}

TEST(ConstantFolding, NeverFoldsState) {
  Tensor lr = Tensor::scalar(0.1);  // held by the caller and rewritten between steps
  Graph g;
  {
    Tracer tracer(g);
    tracer.bind_state({{"lr", lr}});
    Tensor x = tracer.input({Shape{4}, DType::f32}, "x");
    tracer.add_output(ops::mul(x, ops::mul_scalar(lr, 2.0)));
    tracer.finish();
  }
  EXPECT_EQ(passes::fold_constants(g), 0);
  Executable exe(std::move(g), {});
  *lr.data<float>() = 3.f;
  Tensor x = random_tensor({4}, 1);
  expect_all_close(exe.run(std::vector<Tensor>{x}), {ops::mul_scalar(x, 6.0)}, 1e-6, 1e-6,
                   "lr changed after compile");
}

}  // namespace
}  // namespace kiln::graph::fold_test
