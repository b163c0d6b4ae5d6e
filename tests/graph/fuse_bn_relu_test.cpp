#include <functional>

#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"
#include "kiln/ops/cpu_support.h"

namespace kiln::graph::fuse_bn_relu_test {
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
      EXPECT_EQ(exe.report().fused("bn_relu"), 2);
      // No workspace: the backward reads the relu mask from r, the forward's own output.
      for (NodeId n : exe.graph().schedule()) {
        const Node& node = exe.graph().node(n);
        if (node.type == NodeType::bn_relu) {
          EXPECT_EQ(node.outputs.size(), 3u);
        }
        if (node.type == NodeType::bn_relu_grad) {
          ASSERT_EQ(node.inputs.size(), 7u);
          EXPECT_EQ(exe.graph().value(node.inputs[1]).producer,
                    exe.graph().value(node.inputs[4]).producer)
              << "relu output r and mean come from the same fused forward";
          EXPECT_EQ(exe.graph().value(node.inputs[6]).name, "beta")
              << "no residual: the kernel recomputes the relu mask from x and beta";
        }
      }
    }
    for (int s = 0; s < 2; ++s) losses.push_back(exe.run(std::vector<Tensor>{x})[0].item<float>());
    results.push_back(p);
  }
  EXPECT_NEAR(losses[0], losses[2], 1e-6);
  EXPECT_NEAR(losses[1], losses[3], 1e-6);
  expect_all_close(results[1], results[0], 1e-6, 1e-5, "params and running stats");
}

// Eval mode fuses too (the rows kernel normalizes with the running statistics); NCHW data, which
// the rows kernel does not take, stays on the unfused (oneDNN) ops.
TEST(FuseBnRelu, EvalModeFusesOnChannelsLastAndLeavesNchwAlone) {
  Tensor gamma = random_tensor({3}, 1), beta = random_tensor({3}, 2);
  Tensor rm = random_tensor({3}, 3), rv = random_tensor({3}, 4, 0.5f, 1.5f);
  GraphFn fn = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{
        ops::relu(ops::batch_norm(in[0], gamma, beta, rm, rv, false, 0.9, 1e-5)[0])};
  };
  Tensor x = random_tensor({2, 3, 4, 4}, 5);
  Compiled nchw = expect_fused_matches(fn, {x});
  EXPECT_EQ(count_nodes(nchw.exe->graph(), NodeType::bn_relu), 0);
  Compiled cl = expect_fused_matches(fn, {channels_last(x)});
  EXPECT_EQ(count_nodes(cl.exe->graph(), NodeType::bn_relu), 1);
  Compiled rows = expect_fused_matches(fn, {random_tensor({20, 3}, 6)});
  EXPECT_EQ(count_nodes(rows.exe->graph(), NodeType::bn_relu), 1);
}

int count_members(const Graph& g, const std::vector<std::string>& members) {
  int n = 0;
  for (NodeId id : g.schedule()) n += g.node(id).members == members ? 1 : 0;
  return n;
}

// `sets` BatchNorm parameter sets of 16 channels (gamma, beta, running mean, running var) after
// the `leading` tensors; bn(p, k, in) normalizes with the set starting at p[k].
std::vector<Tensor> with_bn_sets(int sets, std::vector<Tensor> leading = {}) {
  for (uint64_t i = 0; i < uint64_t(sets); ++i) {
    leading.push_back(random_tensor({16}, 10 + i, 0.5f, 1.5f));
    leading.push_back(random_tensor({16}, 20 + i));
    leading.push_back(Tensor::zeros({16}));
    leading.push_back(Tensor::ones({16}));
  }
  return leading;
}
Tensor bn(const std::vector<Tensor>& p, size_t k, const Tensor& in) {
  return ops::batch_norm(in, p[k], p[k + 1], p[k + 2], p[k + 3], true, 0.9, 1e-5)[0];
}

// Two SGD steps of loss(p, x), trained on `trained(p)`, traced and compiled with fusion off
// and on, in f32 and bf16 activations: `check_fused` inspects the fused graph, and both must
// reach the same losses, parameters and running statistics.
void expect_fused_training_agrees(
    const std::function<std::vector<Tensor>()>& make,
    const std::function<Tensor(const std::vector<Tensor>&, const Tensor&, DType)>& loss,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& trained,
    const std::function<void(const Graph&)>& check_fused) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    if (dtype == DType::bf16 && !ops::arithmetic_available(dtype)) continue;  // no bf16 conv here
    const double tol = dtype == DType::bf16 ? 2e-3 : 1e-6;
    Tensor x = channels_last(ops::cast(random_tensor({6, 16, 5, 5}, 7, -1, 2), dtype));
    std::vector<std::vector<Tensor>> results;
    std::vector<float> losses;
    for (bool fusion : {false, true}) {
      std::vector<Tensor> p = make();
      Tensor lr = Tensor::scalar(0.1);
      Graph g;
      {
        Tracer tracer(g);
        tracer.bind_state(numbered("p", p));
        Tensor tx = tracer.input(ops::meta_of(x), "x");
        Tensor l = loss(p, tx, dtype);
        std::vector<Tensor> params = trained(p);
        std::vector<Tensor> grads = gradients(tracer, l, params);
        for (size_t i = 0; i < params.size(); ++i) ops::sgd_update(params[i], grads[i], lr, 0.0);
        tracer.add_output(l);
        tracer.finish();
      }
      Executable exe(std::move(g), {.fusion = fusion});
      if (fusion) check_fused(exe.graph());
      for (int s = 0; s < 2; ++s) {
        losses.push_back(exe.run(std::vector<Tensor>{x})[0].item<float>());
      }
      results.push_back(p);
    }
    EXPECT_NEAR(losses[0], losses[2], tol * 10);
    EXPECT_NEAR(losses[1], losses[3], tol * 10);
    expect_all_close(results[1], results[0], tol, 1e-5, "params and running stats");
  }
}

// The gammas and betas of the BN sets from p[first] on.
std::vector<Tensor> gammas_and_betas(const std::vector<Tensor>& p, size_t first = 0) {
  std::vector<Tensor> out;
  for (size_t i = first; i < p.size(); i += 4) {
    out.push_back(p[i]);
    out.push_back(p[i + 1]);
  }
  return out;
}

// A ResNet block's tail without convolutions: r1 = relu(bn1(x)); z = relu(bn2(r1) + bn3(x)), the
// shortcut bn3 traced after bn2 (so the fused bn2 must move to the relu's place), one SGD step on
// the BN parameters. bn1 fuses with its relu (both ways); bn2 with the add and relu; fused and
// unfused steps agree.
TEST(FuseBnRelu, ResidualAddAndReluFuseIntoTheSecondBatchNorm) {
  expect_fused_training_agrees([] { return with_bn_sets(3); },
                               [](const std::vector<Tensor>& p, const Tensor& x, DType) {
                                 Tensor r1 = ops::relu(bn(p, 0, x));
                                 Tensor y2 = bn(p, 4, r1);
                                 Tensor z = ops::relu(ops::add(y2, bn(p, 8, x)));
                                 return ops::mean(ops::square(ops::cast(z, DType::f32)));
                               },
                               [](const std::vector<Tensor>& p) { return gammas_and_betas(p); },
                               [](const Graph& g) {
                                 EXPECT_EQ(count_members(g, {"batch_norm", "add", "relu"}), 1);
                                 EXPECT_EQ(count_members(g, {"batch_norm", "relu"}), 1);
                                 EXPECT_EQ(count_nodes(g, NodeType::bn_relu_grad), 1);
                                 EXPECT_EQ(
                                     count_nodes(g, NodeType::op, int(ops::OpKind::batch_norm)), 1);
                                 EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::relu)), 0);
                               });
}

// Two residual blocks without convolutions inside, after a 1x1 conv (so the first block's input
// needs its gradient): the gradient reaching the first block's output is the shortcut's plus the
// second block's, added and masked by the output's relu, and feeds the first block's last BN
// gradient. The add, relu_grad and BN gradient fuse into one node that also writes the masked
// sum (the shortcut's gradient reads it); fused and unfused steps agree.
TEST(FuseBnRelu, BlockOutputGradientFusesIntoTheBatchNormGradient) {
  expect_fused_training_agrees(
      [] {
        return with_bn_sets(4, {random_tensor({16, 16, 1, 1}, 30, -0.3f, 0.3f)});
      },
      [](const std::vector<Tensor>& p, const Tensor& x, DType dtype) {
        Tensor h = ops::conv2d(x, ops::cast(p[0], dtype), Tensor(), {});
        Tensor z1 = ops::relu(ops::add(bn(p, 5, ops::relu(bn(p, 1, h))), h));
        Tensor z2 = ops::relu(ops::add(bn(p, 13, ops::relu(bn(p, 9, z1))), z1));
        return ops::mean(ops::square(ops::cast(z2, DType::f32)));
      },
      [](const std::vector<Tensor>& p) {
        std::vector<Tensor> params = gammas_and_betas(p, 1);
        params.push_back(p[0]);
        return params;
      },
      [](const Graph& g) {
        EXPECT_EQ(count_nodes(g, NodeType::bn_add_relu_grad), 1);
        EXPECT_EQ(count_members(g, {"add", "relu_grad", "batch_norm_grad"}), 1);
        for (NodeId n : g.schedule()) {
          const Node& node = g.node(n);
          if (node.type != NodeType::bn_add_relu_grad) continue;
          EXPECT_EQ(node.outputs.size(), 4u);
          EXPECT_GT(g.users()[size_t(node.outputs[3])].size(), 0u)
              << "the masked sum is also the shortcut's gradient";
        }
      });
}

}  // namespace
}  // namespace kiln::graph::fuse_bn_relu_test
