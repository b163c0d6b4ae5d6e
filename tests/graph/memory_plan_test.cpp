#include "kiln/graph/memory_plan.h"

#include "graph_test_util.h"
#include "testing/cpu_features.h"

namespace kiln::graph::memory_plan_test {
namespace {
using namespace testing;

TEST(MemoryPlan, CheckerRejectsOverlappingLiveBuffers) {
  MemoryPlan plan;
  plan.buffers.resize(2);
  plan.buffers[0] = {.offset = 0, .bytes = 128, .first = 0, .last = 3, .values = {1}};
  plan.buffers[1] = {.offset = 64, .bytes = 128, .first = 2, .last = 5, .values = {2}};
  plan.arena_bytes = 192;
  EXPECT_THROW(check_memory_plan(plan), Error);
  plan.buffers[1].first = 4;  // no longer live together: sharing memory is fine
  EXPECT_NO_THROW(check_memory_plan(plan));
  plan.buffers[1].offset = 128;  // beyond the arena
  EXPECT_THROW(check_memory_plan(plan), Error);
}

TEST(MemoryPlan, ReusesMemoryAndWritesInPlace) {
  // A long chain: each value dies at its consumer, so two buffers serve every step.
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    for (int i = 0; i < 10; ++i) x = ops::matmul(ops::tanh(x), in[1]);
    return std::vector<Tensor>{x};
  };
  std::vector<Tensor> in{random_tensor({32, 32}, 1, -0.2f, 0.2f),
                         random_tensor({32, 32}, 2, -0.2f, 0.2f)};
  Compiled c = compile_and_run(fn, in, {.fusion = false});
  const MemoryPlan& plan = c.exe->plan();
  check_memory_plan(plan);
  const int64_t one = 32 * 32 * 4;
  // The two inputs are read where the caller keeps them: no buffer.
  int64_t tensors = 0;
  for (const MemoryPlan::Buffer& b : plan.buffers) tensors += b.bytes;
  EXPECT_EQ(tensors, 20 * one - plan.inplace_reuses * one);
  EXPECT_GT(plan.inplace_reuses, 0);  // tanh writes over the matmul result it consumes
  EXPECT_LE(plan.arena_bytes, 3 * one);
  expect_all_close(c.outputs, fn(in), 1e-5, 1e-5, "chain");
}

TEST(MemoryPlan, ViewsKeepTheirBaseAlive) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor t = ops::transpose(ops::exp(in[0]), {1, 0});  // a view of exp's buffer
    Tensor u = ops::neg(in[0]);                          // must not land on exp's buffer
    return std::vector<Tensor>{ops::matmul(t, u)};
  };
  std::vector<Tensor> in{random_tensor({6, 6}, 1)};
  Compiled c = compile_and_run(fn, in, {});
  check_memory_plan(c.exe->plan());
  expect_all_close(c.outputs, fn(in), 1e-5, 1e-5, "views");
}

TEST(MemoryPlan, ReshapeOfChannelsLastCopiesCorrectly) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor y = ops::conv2d(in[0], in[1], Tensor(), {});  // channels-last
    return std::vector<Tensor>{ops::relu(ops::reshape(y, Shape{2, -1}))};
  };
  std::vector<Tensor> in{random_tensor({2, 3, 5, 5}, 1), random_tensor({4, 3, 3, 3}, 2)};
  Compiled c = compile_and_run(fn, in, {});
  expect_all_close(c.outputs, fn(in), 1e-5, 1e-5, "reshape of channels-last");
}

TEST(MemoryPlan, AnInputNothingReadsStillGetsItsBuffer) {
  GraphFn fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::exp(in[0])}; };
  std::vector<Tensor> in{random_tensor({4, 4}, 1), random_tensor({3}, 2)};
  // Copied inputs (read in place, an input has no buffer at all); the plan checker runs while
  // compiling.
  Compiled c = compile_and_run(fn, in, {.inputs_in_place = false});
  check_memory_plan(c.exe->plan());
  expect_all_close(c.outputs, fn(in), 1e-6, 1e-6, "unused input");
}

// Two residual blocks of batch norms after a 1x1 convolution, trained one SGD step: the
// batch-norm gradients write their results over the gradients they consume instead of into
// fresh memory — unfused, dx over dy where dy dies there; fused, dx over g, and at the block
// output dy over b and dx over a.
TEST(MemoryPlan, BatchNormGradientsWriteOverTheGradientsTheyRead) {
  auto params = [] {
    std::vector<Tensor> p{random_tensor({16, 16, 1, 1}, 1, -0.3f, 0.3f)};
    for (uint64_t i = 0; i < 4; ++i) {
      p.push_back(random_tensor({16}, 10 + i, 0.5f, 1.5f));
      p.push_back(random_tensor({16}, 20 + i, -0.2f, 0.2f));
    }
    return clone_all(p);
  };
  LossFn loss = [](const std::vector<Tensor>& p, const Tensor& x, const Tensor&) {
    auto bn = [&](size_t k, const Tensor& in) {
      return ops::batch_norm(in, p[k], p[k + 1], Tensor::zeros({16}), Tensor::ones({16}), true, 0.9,
                             1e-5)[0];
    };
    Tensor h = ops::conv2d(x, p[0], Tensor(), {});
    Tensor z1 = ops::relu(ops::add(bn(3, ops::relu(bn(1, h))), h));
    Tensor z2 = ops::relu(ops::add(bn(7, ops::relu(bn(5, z1))), z1));
    return ops::mean(ops::square(z2));
  };
  Tensor x = channels_last(random_tensor({6, 16, 5, 5}, 7, -1, 2));
  Tensor labels = Tensor::zeros({6}, DType::i32), lr = Tensor::scalar(0.1);
  std::vector<std::vector<Tensor>> trained;
  std::vector<float> losses;
  for (bool fusion : {false, true}) {
    std::vector<Tensor> p = params();
    Executable exe(trace_step(loss, p, x, labels, lr), {.fusion = fusion});
    losses.push_back(exe.run(std::vector<Tensor>{x, labels})[0].item<float>());
    trained.push_back(p);
    const Graph& g = exe.graph();
    const MemoryPlan& plan = exe.plan();
    check_memory_plan(plan);
    auto same_buffer = [&](ValueId a, ValueId b) {
      return plan.buffer_of[size_t(a)] != MemoryPlan::kNone &&
             plan.buffer_of[size_t(a)] == plan.buffer_of[size_t(b)];
    };
    if (!fusion) {
      // dy is relu_grad's result, read by the BN gradient alone except at a block's output
      // (where the shortcut's gradient reads it too).
      int bn_grads = 0, over_dy = 0;
      for (NodeId n : g.schedule()) {
        const Node& node = g.node(n);
        if (node.type != NodeType::op || node.op != ops::OpKind::batch_norm_grad) continue;
        ++bn_grads;
        over_dy += same_buffer(node.outputs[0], node.inputs[0]) ? 1 : 0;
      }
      EXPECT_EQ(bn_grads, 4);
      EXPECT_EQ(over_dy, 2);
      continue;
    }
    int relu_grads = 0, add_relu_grads = 0;
    for (NodeId n : g.schedule()) {
      const Node& node = g.node(n);
      if (node.type == NodeType::bn_relu_grad) {
        ++relu_grads;
        EXPECT_TRUE(same_buffer(node.outputs[0], node.inputs[0])) << "dx over g";
      }
      if (node.type == NodeType::bn_add_relu_grad) {
        ++add_relu_grads;
        EXPECT_TRUE(same_buffer(node.outputs[3], node.inputs[1])) << "dy over b";
        EXPECT_TRUE(same_buffer(node.outputs[0], node.inputs[0])) << "dx over a";
      }
    }
    EXPECT_GE(relu_grads, 2);
    EXPECT_EQ(add_relu_grads, 1);
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-6);
  expect_all_close(trained[1], trained[0], 1e-6, 1e-5, "params after one step");
}

// The perceptron's relu gradient and its bias gradient run as one fused reduction: its chain
// result (relu_grad of the incoming gradient) is written over that gradient, which dies there,
// and the step trains as without fusion.
TEST(MemoryPlan, FusedReductionWritesItsChainResultOverADyingInput) {
  Tensor x = random_tensor({64, 24}, 8), labels = random_labels(64, 10, 9);
  Tensor lr = Tensor::scalar(0.1);
  std::vector<std::vector<Tensor>> trained;
  std::vector<float> losses;
  for (bool fusion : {false, true}) {
    std::vector<Tensor> p = mlp_params(24, 256, 10, 3);
    Executable exe(trace_step(mlp_loss, p, x, labels, lr), {.fusion = fusion});
    losses.push_back(exe.run(std::vector<Tensor>{x, labels})[0].item<float>());
    trained.push_back(p);
    check_memory_plan(exe.plan());
    if (!fusion) continue;
    int reductions = 0, over_input = 0;
    for (NodeId n : exe.graph().schedule()) {
      const Node& node = exe.graph().node(n);
      if (node.type != NodeType::fused_reduction || node.outputs.size() < 2) continue;
      ++reductions;
      const int b = exe.plan().buffer_of[size_t(node.outputs[1])];
      for (ValueId in : node.inputs) over_input += b == exe.plan().buffer_of[size_t(in)] ? 1 : 0;
    }
    EXPECT_EQ(reductions, 1) << exe.graph().str();
    EXPECT_EQ(over_input, 1) << "relu_grad's result over the gradient it reads";
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-6);
  expect_all_close(trained[1], trained[0], 1e-6, 1e-5, "params after one step");
}

// graph_test_util.h's conv net (LeNet's shape): the second convolution's fused pooled gradient
// writes dx (the gradient of the first layer's pooled output) over that pooled output, which
// dies there.
TEST(MemoryPlan, PooledConvolutionGradientWritesDxOverItsInput) {
  if (!kiln::testing::avx512_kernels_run()) GTEST_SKIP() << kiln::testing::kNoAvx512Kernels;
  Tensor x = random_tensor({8, 1, 20, 20}, 1), labels = random_labels(8, 10, 2);
  Tensor lr = Tensor::scalar(0.05);
  std::vector<std::vector<Tensor>> trained;
  for (bool fusion : {false, true}) {
    std::vector<Tensor> p = conv_net_params(1);
    Executable exe(trace_step(conv_net_loss, p, x, labels, lr), {.fusion = fusion});
    exe.run(std::vector<Tensor>{x, labels});
    trained.push_back(p);
    check_memory_plan(exe.plan());
    if (!fusion) continue;
    int with_dx = 0;
    for (NodeId n : exe.graph().schedule()) {
      const Node& node = exe.graph().node(n);
      if (node.type != NodeType::pooled_conv_grad || node.inputs[3] == kNoValue) continue;
      ++with_dx;
      const int b = exe.plan().buffer_of[size_t(node.outputs.back())];
      EXPECT_NE(b, MemoryPlan::kNone);
      EXPECT_EQ(b, exe.plan().buffer_of[size_t(node.inputs[2])]) << "dx over x";
    }
    EXPECT_EQ(with_dx, 1) << exe.graph().str();
  }
  expect_all_close(trained[1], trained[0], 1e-5, 1e-4, "params after one step");
}

// The unfused batch-norm gradient on NCHW data runs oneDNN's kernel, in place too; the step
// must train exactly as eagerly.
TEST(MemoryPlan, BatchNormGradientOnNchwDataRunsInPlaceAndMatchesEager) {
  LossFn loss = [](const std::vector<Tensor>& p, const Tensor& x, const Tensor&) {
    Tensor y =
        ops::batch_norm(x, p[0], p[1], Tensor::zeros({3}), Tensor::ones({3}), true, 0.9, 1e-5)[0];
    return ops::mean(ops::square(ops::relu(y)));
  };
  Tensor x = random_tensor({4, 3, 6, 6}, 1, -1, 2);  // NCHW: not the rows kernels' layout
  Tensor labels = Tensor::zeros({4}, DType::i32), lr = Tensor::scalar(0.1);
  auto params = [] {
    return clone_all({random_tensor({3}, 2, 0.5f, 1.5f), random_tensor({3}, 3, -0.2f, 0.2f)});
  };
  std::vector<Tensor> eager = params();
  const float eager_loss = eager_step(loss, eager, x, labels, lr);
  std::vector<Tensor> compiled = params();
  Executable exe(trace_step(loss, compiled, x, labels, lr), {.fusion = false});
  const float compiled_loss = exe.run(std::vector<Tensor>{x, labels})[0].item<float>();
  int in_place = 0;
  for (NodeId n : exe.graph().schedule()) {
    const Node& node = exe.graph().node(n);
    if (node.type == NodeType::op && node.op == ops::OpKind::batch_norm_grad) {
      in_place += exe.plan().buffer_of[size_t(node.outputs[0])] ==
                  exe.plan().buffer_of[size_t(node.inputs[0])];
    }
  }
  EXPECT_EQ(in_place, 1);
  EXPECT_NEAR(compiled_loss, eager_loss, 1e-6);
  expect_all_close(compiled, eager, 1e-6, 1e-5, "gamma and beta after one step");
}

}  // namespace
}  // namespace kiln::graph::memory_plan_test
