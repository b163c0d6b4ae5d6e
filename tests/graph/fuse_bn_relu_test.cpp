#include "graph_test_util.h"
#include "kiln/graph/passes/passes.h"

namespace kiln::graph {
namespace {
using namespace testing;

// conv -> BN -> relu -> loss, trained one SGD step: forward and backward BN+ReLU both fuse,
// and parameters and running statistics match the unfused graph.
TEST(FuseBnRelu, ForwardAndBackwardFuseAndAgree) {
  auto make = [] {
    return std::vector<Tensor>{random_tensor({8, 3, 3, 3}, 1, -0.4f, 0.4f),
                               random_tensor({8}, 2, 0.5f, 1.5f), random_tensor({8}, 3),
                               Tensor::zeros({8}), Tensor::ones({8})};
  };
  Tensor x = random_tensor({4, 3, 10, 10}, 4);
  auto loss = [](const std::vector<Tensor>& p, const Tensor& in) {
    Tensor c = ops::conv2d(in, p[0], Tensor(), {.padding = {1, 1}});
    Tensor y = ops::relu(ops::batch_norm(c, p[1], p[2], p[3], p[4], true, 0.9, 1e-5)[0]);
    return ops::mean(ops::square(y));
  };
  std::vector<std::vector<Tensor>> results;
  std::vector<float> losses;
  for (bool fusion : {false, true}) {
    std::vector<Tensor> p = make();
    Tensor lr = Tensor::scalar(0.1);
    Graph g;
    {
      Tracer tracer(g);
      tracer.bind_state({{"w", p[0]}, {"gamma", p[1]}, {"beta", p[2]}, {"rm", p[3]}, {"rv", p[4]}});
      Tensor tx = tracer.input(ops::meta_of(x), "x");
      Tensor l = loss(p, tx);
      std::vector<Tensor> params{p[0], p[1], p[2]};
      std::vector<Tensor> grads = gradients(tracer, l, params);
      for (size_t i = 0; i < 3; ++i) ops::sgd_update(params[i], grads[i], lr, 0.0);
      tracer.add_output(l);
      tracer.finish();
    }
    Executable exe(std::move(g), {.fusion = fusion});
    if (fusion) {
      EXPECT_EQ(count_nodes(exe.graph(), NodeType::bn_relu), 1);
      EXPECT_EQ(count_nodes(exe.graph(), NodeType::bn_relu_grad), 1);
      EXPECT_EQ(count_nodes(exe.graph(), NodeType::op, int(ops::OpKind::relu)), 0);
      EXPECT_EQ(count_nodes(exe.graph(), NodeType::op, int(ops::OpKind::relu_grad)), 0);
      EXPECT_EQ(exe.report().fused_bn_relu, 2);
    }
    for (int s = 0; s < 2; ++s) losses.push_back(exe.run(std::vector<Tensor>{x})[0].item<float>());
    results.push_back(p);
  }
  EXPECT_NEAR(losses[0], losses[2], 1e-6);
  EXPECT_NEAR(losses[1], losses[3], 1e-6);
  expect_all_close(results[1], results[0], 1e-6, 1e-5, "params and running stats");
}

TEST(FuseBnRelu, EvalModeBatchNormIsLeftAlone) {
  Tensor gamma = random_tensor({3}, 1), beta = random_tensor({3}, 2);
  Tensor rm = random_tensor({3}, 3), rv = random_tensor({3}, 4, 0.5f, 1.5f);
  GraphFn fn = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{
        ops::relu(ops::batch_norm(in[0], gamma, beta, rm, rv, false, 0.9, 1e-5)[0])};
  };
  Compiled c = expect_fused_matches(fn, {random_tensor({2, 3, 4, 4}, 5)});
  EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::bn_relu), 0);
}

}  // namespace
}  // namespace kiln::graph
