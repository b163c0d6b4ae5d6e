#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"
#include "kiln/ops/kernels/conv_winograd.h"
#include "testing/cpu_features.h"

namespace kiln::graph::fuse_bn_relu_conv_test {
namespace {
using namespace testing;

// conv -> BN -> relu -> conv (3x3, 16 or 32 channels, 8·16·17 output pixels: enough for the
// Winograd kernel, see winograd_3x3_pays) -> loss, trained with SGD; the batch norm's
// statistics, the second convolution (reading relu(batch_norm(x)) on the fly) and its weight
// gradient, and the batch norm's gradient (reading x for the mask it never read r for).
struct TwoConvolutions {
  // `flatten`: the loss reads the second convolution's output through a reshape (as a Dense
  // after a Flatten does), so its gradient comes back row-major.
  explicit TwoConvolutions(int64_t channels, bool flatten = false) : flatten(flatten) {
    const int64_t c = channels;
    params = {random_tensor({c, c, 3, 3}, 1, -0.2f, 0.2f), random_tensor({c}, 2, 0.5f, 1.5f),
              random_tensor({c}, 3), random_tensor({c, c, 3, 3}, 4, -0.2f, 0.2f)};
    stats = {Tensor::zeros({c}), Tensor::ones({c})};
  }
  Graph trace_step(const Tensor& x) {
    auto loss = [&](const std::vector<Tensor>& in) {
      Tensor h = ops::conv2d(in[0], params[0], Tensor(), {.padding = {1, 1}});
      h = ops::batch_norm(h, params[1], params[2], stats[0], stats[1], true, 0.9, 1e-5)[0];
      h = ops::conv2d(ops::relu(h), params[3], Tensor(), {.padding = {1, 1}});
      if (flatten) h = ops::flatten(h);
      return ops::mean(ops::square(h));
    };
    return trace_sgd_step(loss, params, {{"x", x}}, Tensor::scalar(0.05), numbered("s", stats));
  }
  bool flatten;
  std::vector<Tensor> params, stats;
};

struct Trained {
  std::vector<float> losses;
  std::vector<Tensor> params, stats;
  CompileReport report;
  Graph graph;
};

Trained train(int64_t channels, bool into_conv, bool block_layout, bool flatten = false) {
  TwoConvolutions net(channels, flatten);
  Tensor x = channels_last(random_tensor({8, channels, 16, 17}, 5));
  Executable exe(net.trace_step(x),
                 {.fusion = true, .block_layout = block_layout, .bn_relu_into_conv = into_conv});
  Trained t;
  for (int s = 0; s < 3; ++s) t.losses.push_back(exe.run(std::vector<Tensor>{x})[0].item<float>());
  t.params = net.params;
  t.stats = net.stats;
  t.report = exe.report();
  t.graph = exe.graph();
  return t;
}

void expect_bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].to_vector<float>(), b[i].to_vector<float>()) << what << " " << i;
  }
}

// The fusion happens (the statistics node, the two convolution nodes, no relu output left), and
// the step computes the unfused step's values bit for bit: the convolutions normalize with the
// batch-norm kernel's own arithmetic, and the Winograd kernel runs either way.
TEST(FuseBnReluConv, FusesAndTrainsBitForBitAsWithout) {
  if (!ops::winograd_3x3_fits({8, 16, 16, 17}, {16, 16, 3, 3}, {.padding = {1, 1}})) {
    GTEST_SKIP() << "no Winograd kernel in this build";
  }
  for (int64_t channels : {16, 32}) {
    for (bool block_layout : {false, true}) {
      const std::string what = std::to_string(channels) + " channels" +
                               (block_layout ? ", blocked layout" : ", channels-last");
      Trained fused = train(channels, true, block_layout);
      Trained plain = train(channels, false, block_layout);
      EXPECT_EQ(fused.report.fused("bn_relu_conv"), 2) << what;
      EXPECT_EQ(plain.report.fused("bn_relu_conv"), 0) << what;
      EXPECT_EQ(count_nodes(fused.graph, NodeType::bn_stats), 1) << what;
      EXPECT_EQ(count_nodes(fused.graph, NodeType::bn_relu), 0) << what;
      EXPECT_EQ(count_nodes(plain.graph, NodeType::bn_relu), 1) << what;
      for (NodeId n : fused.graph.schedule()) {
        const Node& node = fused.graph.node(n);
        if (node.type == NodeType::bn_relu_conv) {
          EXPECT_EQ(node.inputs.size(), 6u) << what;
          EXPECT_EQ(fused.graph.value(node.inputs[2]).name, "p1") << what;  // gamma
        }
      }
      EXPECT_EQ(fused.losses, plain.losses) << what;
      expect_bitwise_equal(fused.params, plain.params, what + " params");
      expect_bitwise_equal(fused.stats, plain.stats, what + " running statistics");
      // The relu output is no longer kept from the forward to the backward.
      EXPECT_LT(fused.report.live_bytes_peak, plain.report.live_bytes_peak) << what;
    }
  }
}

// Where some other reader needs the relu output (here the loss reads it too), it stays a
// fused[batch_norm,relu] output and the convolution reads it as before; so where the
// convolution is too small for the Winograd kernel.
TEST(FuseBnReluConv, OtherReadersKeepTheReluOutput) {
  if (!kiln::testing::avx512_kernels_run()) GTEST_SKIP() << kiln::testing::kNoAvx512Kernels;
  Tensor w = random_tensor({16, 16, 3, 3}, 6, -0.2f, 0.2f);
  Tensor gamma = random_tensor({16}, 7, 0.5f, 1.5f), beta = random_tensor({16}, 8);
  Tensor rm = Tensor::zeros({16}), rv = Tensor::ones({16});
  Tensor x = channels_last(random_tensor({8, 16, 16, 17}, 9));
  Graph g;
  {
    Tracer tracer(g);
    tracer.bind_state({{"w", w}, {"gamma", gamma}, {"beta", beta}, {"rm", rm}, {"rv", rv}});
    Tensor tx = tracer.input(ops::meta_of(x), "x");
    Tensor r = ops::relu(ops::batch_norm(tx, gamma, beta, rm, rv, true, 0.9, 1e-5)[0]);
    Tensor y = ops::conv2d(r, w, Tensor(), {.padding = {1, 1}});
    tracer.add_output(ops::add(ops::mean(ops::square(y)), ops::mean(r)));
    tracer.finish();
  }
  Executable exe(std::move(g), {.fusion = true});
  EXPECT_EQ(exe.report().fused("bn_relu_conv"), 0);
  EXPECT_EQ(count_nodes(exe.graph(), NodeType::bn_relu), 1);
  EXPECT_EQ(count_nodes(exe.graph(), NodeType::bn_stats), 0);
  EXPECT_EQ(train(16, true, false).report.fused("bn_relu_conv"), 2);  // where it pays, it fuses
  TwoConvolutions small(16);
  Tensor few = channels_last(random_tensor({2, 16, 7, 9}, 10));
  Executable small_exe(small.trace_step(few), {.fusion = true});
  EXPECT_EQ(small_exe.report().fused("bn_relu_conv"), 0);
  EXPECT_EQ(count_nodes(small_exe.graph(), NodeType::bn_relu), 1);
}

// The kernel reads the weight gradient's dy dense channels-last: where it comes back row-major
// (through a Flatten) the batch norm stays unfused, and the step trains as without the fusion.
// (The fused node used to be made anyway, and compiling the step threw "outside the Winograd
// kernel's rule".)
TEST(FuseBnReluConv, ARowMajorGradientKeepsTheUnfusedKernels) {
  if (!kiln::testing::avx512_kernels_run()) GTEST_SKIP() << kiln::testing::kNoAvx512Kernels;
  for (bool block_layout : {false, true}) {
    Trained fused = train(16, true, block_layout, true);
    Trained plain = train(16, false, block_layout, true);
    EXPECT_EQ(fused.report.fused("bn_relu_conv"), 0);
    EXPECT_EQ(count_nodes(fused.graph, NodeType::bn_relu), 1);
    EXPECT_EQ(fused.losses, plain.losses);
    expect_bitwise_equal(fused.params, plain.params, "row-major dy, parameters");
  }
}

}  // namespace
}  // namespace kiln::graph::fuse_bn_relu_conv_test
