#include <filesystem>
#include <fstream>
#include <sstream>

#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::block_layout_test {
namespace {
using namespace testing;

// A ResNet basic block (conv-BN-relu-conv-BN + shortcut, relu) from `in` to `out` channels,
// then a loss. With in != out the block halves the size and its shortcut is a strided 1x1
// conv + BN, as where ResNet-20 changes stage. params: w1, g1, b1, w2, g2, b2[, ws, gs, bs];
// state holds the running statistics. A `pooled` block is a network's tail instead: a stem conv +
// BN + relu before it, and after it a global average pool and a linear layer (ResNet's head)
// before the loss; params then add ws, gs, bs (stem) and fc at the end.
struct Block {
  Block(int64_t in, int64_t out, bool pooled = false) : downsample(in != out), pooled(pooled) {
    const int64_t c = out;
    params = {random_tensor({c, in, 3, 3}, 1, -0.2f, 0.2f),
              random_tensor({c}, 2, 0.5f, 1.5f),
              random_tensor({c}, 3),
              random_tensor({c, c, 3, 3}, 4, -0.2f, 0.2f),
              random_tensor({c}, 5, 0.5f, 1.5f),
              random_tensor({c}, 6)};
    stats = {Tensor::zeros({c}), Tensor::ones({c}), Tensor::zeros({c}), Tensor::ones({c})};
    if (downsample) {
      params.push_back(random_tensor({c, in, 1, 1}, 9, -0.5f, 0.5f));
      params.push_back(random_tensor({c}, 10, 0.5f, 1.5f));
      params.push_back(random_tensor({c}, 11));
      stats.push_back(Tensor::zeros({c}));
      stats.push_back(Tensor::ones({c}));
    }
    if (pooled) {
      params.push_back(random_tensor({in, in, 3, 3}, 12, -0.2f, 0.2f));
      params.push_back(random_tensor({in}, 13, 0.5f, 1.5f));
      params.push_back(random_tensor({in}, 14));
      params.push_back(random_tensor({c, 10}, 15, -0.3f, 0.3f));
      stats.push_back(Tensor::zeros({in}));
      stats.push_back(Tensor::ones({in}));
    }
  }
  explicit Block(int64_t channels) : Block(channels, channels) {}
  Tensor loss(const Tensor& input) const {
    const auto& p = params;
    const int64_t stride = downsample ? 2 : 1;
    Tensor x = input;
    if (pooled) {
      const size_t s = params.size() - 4, st = stats.size() - 2;
      x = ops::conv2d(x, p[s], Tensor(), {.padding = {1, 1}});
      x = ops::batch_norm(x, p[s + 1], p[s + 2], stats[st], stats[st + 1], true, 0.9, 1e-5)[0];
      x = ops::relu(x);
    }
    Tensor h = ops::conv2d(x, p[0], Tensor(), {.stride = {stride, stride}, .padding = {1, 1}});
    h = ops::relu(ops::batch_norm(h, p[1], p[2], stats[0], stats[1], true, 0.9, 1e-5)[0]);
    h = ops::conv2d(h, p[3], Tensor(), {.padding = {1, 1}});
    h = ops::batch_norm(h, p[4], p[5], stats[2], stats[3], true, 0.9, 1e-5)[0];
    Tensor shortcut = x;
    if (downsample) {
      shortcut = ops::conv2d(x, p[6], Tensor(), {.stride = {2, 2}});
      shortcut = ops::batch_norm(shortcut, p[7], p[8], stats[4], stats[5], true, 0.9, 1e-5)[0];
    }
    Tensor y = ops::relu(ops::add(h, shortcut));
    if (pooled) {
      Tensor logits = ops::matmul(ops::mean(y, {2, 3}), p.back());
      return ops::mean(ops::square(logits));
    }
    return ops::mean(ops::square(y));
  }
  bool downsample, pooled;
  Graph trace_step(const Tensor& x) {
    return trace_sgd_step([&](const std::vector<Tensor>& in) { return loss(in[0]); }, params,
                          {{"x", x}}, Tensor::scalar(0.05), numbered("s", stats));
  }
  std::vector<Tensor> params, stats;
};

struct StepResult {
  std::vector<float> losses;
  std::vector<Tensor> params, stats;
  CompileReport report;
  std::vector<NodeType> types;
};

StepResult train(int64_t channels, bool block_layout, int steps = 3, int64_t size = 6,
                 int64_t batch = 4, int64_t out_channels = 0, bool pooled = false) {
  Block block(channels, out_channels ? out_channels : channels, pooled);
  Tensor x = channels_last(random_tensor({batch, channels, size, size}, 7));
  Executable exe(block.trace_step(x), {.fusion = true, .block_layout = block_layout});
  EXPECT_NO_THROW(passes::check_block_layout(exe.graph()));
  StepResult r;
  for (int s = 0; s < steps; ++s)
    r.losses.push_back(exe.run(std::vector<Tensor>{x})[0].item<float>());
  r.params = block.params;
  r.stats = block.stats;
  r.report = exe.report();
  for (NodeId n : exe.graph().schedule()) r.types.push_back(exe.graph().node(n).type);
  return r;
}

// The blocked step trains as the channels-last one: both round in f32, their convolutions in
// other kernels (blocked, Winograd), well-conditioned nets here.
void expect_same_training(const StepResult& blocked, const StepResult& plain) {
  for (size_t s = 0; s < blocked.losses.size(); ++s) {
    EXPECT_NEAR(blocked.losses[s], plain.losses[s], 1e-5 + 1e-4 * std::abs(plain.losses[s]))
        << "step " << s;
  }
  expect_all_close(blocked.params, plain.params, 1e-5, 1e-4, "params");
  expect_all_close(blocked.stats, plain.stats, 1e-5, 1e-4, "running statistics");
}

// 32 channels: the convolutions, batch norms and their fused relu / residual / relu_grad run
// blocked (Winograd convolutions), and the step trains exactly as the channels-last one does.
TEST(BlockLayout, ResidualBlockRunsBlockedAndMatchesChannelsLast) {
  StepResult blocked = train(32, true), plain = train(32, false);
  EXPECT_GT(blocked.report.blocked_values, 8);
  EXPECT_GT(blocked.report.layout_reorders, 0);  // the input, and the loss's square/mean
  EXPECT_LT(blocked.report.layout_reorders, blocked.report.blocked_values);
  EXPECT_EQ(plain.report.blocked_values, 0);
  EXPECT_EQ(std::count(plain.types.begin(), plain.types.end(), NodeType::reorder), 0);
  expect_same_training(blocked, plain);
}

// 64 channels (four blocks) at an odd size, the shapes of ResNet-20's last stage, on enough
// data that the batch-norm kernels split it between threads.
// The batch of the larger blocked steps: where the blocked layout does not pay (no avx512_core)
// oneDNN runs blocked convolutions in its reference kernels, 1,000x slower than its others, and
// these three tests took 80 s at their usual batch.
int64_t blocked_batch(int64_t usual) {
  return block_layout_pays() ? usual : 2;
}

TEST(BlockLayout, FourBlocksOfChannelsMatchChannelsLast) {
  const int64_t batch = blocked_batch(16);
  StepResult blocked = train(64, true, 3, 7, batch), plain = train(64, false, 3, 7, batch);
  EXPECT_GT(blocked.report.blocked_values, 8);
  expect_same_training(blocked, plain);
}

// Where a stage changes: 32 -> 64 channels, stride 2, 1x1 conv + BN shortcut.
TEST(BlockLayout, DownsamplingBlockMatchesChannelsLast) {
  const int64_t batch = blocked_batch(8);
  StepResult blocked = train(32, true, 3, 14, batch, 64),
             plain = train(32, false, 3, 14, batch, 64);
  EXPECT_GT(blocked.report.blocked_values, 8);
  expect_same_training(blocked, plain);
}

// ResNet's tail: relu -> mean over H, W -> linear. The pool reads the blocked relu output and
// its gradient (broadcast from [N, C, 1, 1], masked by that relu) is written blocked: no value
// changes layout anywhere in the step, and it trains as the channels-last one does.
TEST(BlockLayout, GlobalAveragePoolAndItsGradientStayBlocked) {
  const int64_t batch = blocked_batch(16);
  StepResult blocked = train(64, true, 3, 7, batch, 0, true);
  StepResult plain = train(64, false, 3, 7, batch, 0, true);
  EXPECT_GT(blocked.report.blocked_values, 8);
  EXPECT_EQ(blocked.report.layout_reorders, 0);
  EXPECT_EQ(std::count(blocked.types.begin(), blocked.types.end(), NodeType::reorder), 0);
  expect_same_training(blocked, plain);
}

// The pool reads its input as it is: blocked above, channels-last here (16 channels never
// block), and the per-channel elementwise ops run on the plain engine.
TEST(BlockLayout, GlobalAveragePoolOfSixteenChannelsStaysChannelsLast) {
  StepResult r = train(16, true, 2, 5, 4, 0, true), plain = train(16, false, 2, 5, 4, 0, true);
  EXPECT_EQ(r.report.blocked_values, 0);
  EXPECT_EQ(r.report.layout_reorders, 0);
  expect_same_training(r, plain);
}

// A 3-channel input convolved to 32 channels (a CIFAR-style stem): that convolution mixes
// whole blocks with a 3-channel tensor, so it stays channels-last, its output converted once;
// the next convolution and the batch norms run blocked, and training matches the pass off.
TEST(BlockLayout, ConvolutionFromFewChannelsStaysChannelsLast) {
  std::vector<std::vector<float>> losses(2);
  std::vector<std::vector<Tensor>> params(2);
  for (bool block_layout : {false, true}) {
    std::vector<Tensor> p{random_tensor({32, 3, 3, 3}, 1, -0.3f, 0.3f),
                          random_tensor({32, 32, 3, 3}, 2, -0.2f, 0.2f)};
    std::vector<Tensor> stats{Tensor::zeros({32}), Tensor::ones({32}), Tensor::zeros({32}),
                              Tensor::ones({32})};
    Tensor gamma = random_tensor({32}, 3, 0.5f, 1.5f), beta = random_tensor({32}, 4);
    Tensor x = channels_last(random_tensor({4, 3, 8, 8}, 5));
    Graph g;
    {
      Tracer tracer(g);
      tracer.bind_state(numbered("p", p, numbered("s", stats, {{"gamma", gamma}, {"beta", beta}})));
      Tensor tx = tracer.input(ops::meta_of(x), "x");
      Tensor h = ops::conv2d(tx, p[0], Tensor(), {.padding = {1, 1}});
      h = ops::relu(ops::batch_norm(h, gamma, beta, stats[0], stats[1], true, 0.9, 1e-5)[0]);
      h = ops::conv2d(h, p[1], Tensor(), {.padding = {1, 1}});
      h = ops::relu(ops::batch_norm(h, gamma, beta, stats[2], stats[3], true, 0.9, 1e-5)[0]);
      Tensor l = ops::mean(ops::square(h));
      std::vector<Tensor> grads = gradients(tracer, l, p);
      Tensor lr = Tensor::scalar(0.05);
      for (size_t i = 0; i < p.size(); ++i) ops::sgd_update(p[i], grads[i], lr, 0.0);
      tracer.add_output(l);
      tracer.finish();
    }
    Executable exe(std::move(g), {.fusion = true, .block_layout = block_layout});
    if (block_layout) {
      EXPECT_GT(exe.report().blocked_values, 0);
      const Graph& cg = exe.graph();
      int convolutions = 0;
      for (NodeId n : cg.schedule()) {
        const Node& node = cg.node(n);
        // (A convolution that reads relu(batch_norm(x)) on the fly is a bn_relu_conv node.)
        if ((node.type != NodeType::op && node.type != NodeType::bn_relu_conv) ||
            (node.op != ops::OpKind::conv2d && node.op != ops::OpKind::conv2d_backward_data &&
             node.op != ops::OpKind::conv2d_backward_weights)) {
          continue;
        }
        ++convolutions;
        bool touches_three_channels = false;
        for (const auto* values : {&node.inputs, &node.outputs}) {
          for (ValueId v : *values) {
            const Shape& shape = cg.value(v).meta.shape;
            touches_three_channels |= shape.rank() == 4 && shape[1] == 3;
          }
        }
        if (touches_three_channels) {
          EXPECT_EQ(layout_bits(node), 0u) << node_label(node);
        }
      }
      EXPECT_EQ(convolutions, 5);  // two forward, two weight gradients, one data gradient
    }
    for (int s = 0; s < 3; ++s) {
      losses[block_layout].push_back(exe.run(std::vector<Tensor>{x})[0].item<float>());
    }
    params[block_layout] = p;
  }
  for (size_t s = 0; s < 3; ++s) EXPECT_NEAR(losses[1][s], losses[0][s], 1e-4 * losses[0][s]);
  expect_all_close(params[1], params[0], 1e-5, 1e-4, "params");
}

// The compiled dump shows where values are blocked and the reorder nodes between layouts.
TEST(BlockLayout, DumpShowsLayoutsAndReorders) {
  const std::string dir = ::testing::TempDir() + "/kiln_block_layout_dump";
  std::filesystem::remove_all(dir);
  Block block(32);
  Tensor x = channels_last(random_tensor({2, 32, 5, 5}, 8));
  // Blocked on any CPU (the default is off where oneDNN has no fast nChw16c kernels).
  Executable exe(block.trace_step(x),
                 {.fusion = true, .block_layout = true, .dump_dir = dir, .dump_name = "b"});
  auto read = [](const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  const std::string text = read(dir + "/b_1_compiled.txt"), dot = read(dir + "/b_1_compiled.dot");
  EXPECT_NE(text.find("reorder[nhwc->nChw16c]"), std::string::npos) << text;
  EXPECT_NE(text.find("nChw16c=in["), std::string::npos) << text;
  EXPECT_NE(dot.find(" nChw16c\"]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("palegreen"), std::string::npos) << dot;
}

// With 16 channels the layouts are the same bytes and nothing is converted; the pass leaves
// such graphs alone.
TEST(BlockLayout, SixteenChannelsStayChannelsLast) {
  StepResult r = train(16, true, 1);
  EXPECT_EQ(r.report.blocked_values, 0);
  EXPECT_EQ(r.report.layout_reorders, 0);
}

// The checker rejects a node told to read a layout its input is not in.
TEST(BlockLayout, CheckerCatchesALayoutMismatch) {
  Block block(32);
  Tensor x = channels_last(random_tensor({2, 32, 5, 5}, 8));
  Graph g = block.trace_step(x);
  passes::fuse_bn_relu(g);
  g.reorder(g.schedule());
  ASSERT_GT(passes::block_layout(g), 0);
  EXPECT_NO_THROW(passes::check_block_layout(g));
  bool flipped = false;
  for (NodeId n : g.schedule()) {
    Node& node = g.node(n);
    if (!flipped && node.type == NodeType::op && node.op == ops::OpKind::conv2d_backward_weights &&
        input_is_nchw16c(node, 0)) {
      set_layout_bits(node, layout_bits(node) & ~1u);  // claims dy is channels-last
      flipped = true;
    }
  }
  ASSERT_TRUE(flipped);
  EXPECT_THROW(passes::check_block_layout(g), Error);
}

}  // namespace
}  // namespace kiln::graph::block_layout_test
