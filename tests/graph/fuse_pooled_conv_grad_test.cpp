// Fusion (f), passes/fuse_pooled_conv_grad.cpp with kernels/pooled_conv_grad.cpp: a 2×2/2 max
// pool's gradient [+ relu_grad] and the backward of the convolution before it, run over the
// pool's sparse gradient. The fused result must match the unfused graph and eager ops (the same
// sums in another order: float rounding only), and the fusion must really happen.
#include "graph_test_util.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/graph/detail/passes.h"
#include "kiln/ops/dispatch.h"
#include "testing/cpu_features.h"

namespace kiln::graph::fuse_pooled_conv_grad_test {
namespace {
using namespace testing;

struct Case {
  int64_t n, c, h, w, o, k, pad;
  bool relu_mask, data_gradient, bias;
  bool dyp_channels_last;
};

// relu_grad(max_pool2d_grad(dyp, r), r) fed to conv2d_backward_data / _weights, as graph
// autodiff emits them for conv -> relu -> max_pool2d.
GraphFn pooled_conv_backward(const Case& c) {
  return [c](const std::vector<Tensor>& in) {
    const Tensor &dyp = in[0], &r = in[1], &x = in[2];
    const Shape w_shape{c.o, c.c, c.k, c.k};
    ops::Attrs pool = ops::PoolAttrs{.kernel = {2, 2}, .stride = {2, 2}};
    Tensor g = ops::call_one_output(ops::OpKind::max_pool2d_grad, {dyp, r}, pool);
    if (c.relu_mask) g = ops::relu_grad(g, r);
    const ops::Conv2dOptions opt{.padding = {c.pad, c.pad}};
    std::vector<Tensor> out = ops::conv2d_backward_weights(g, x, w_shape, c.bias, opt);
    if (!c.bias) out.resize(1);
    if (c.data_gradient) out.push_back(ops::conv2d_backward_data(g, in[3], x.shape(), opt));
    return out;
  };
}

// dyp, r, x and (for dx) w.
std::vector<Tensor> inputs_for(const Case& c, uint64_t seed) {
  const int64_t oh = c.h + 2 * c.pad - c.k + 1, ow = c.w + 2 * c.pad - c.k + 1;
  Tensor dyp = random_tensor({c.n, c.o, oh / 2, ow / 2}, seed);
  std::vector<Tensor> in{c.dyp_channels_last ? channels_last(dyp) : dyp,
                         channels_last(random_tensor({c.n, c.o, oh, ow}, seed + 1)),
                         channels_last(random_tensor({c.n, c.c, c.h, c.w}, seed + 2))};
  if (c.data_gradient) in.push_back(random_tensor({c.o, c.c, c.k, c.k}, seed + 3));
  return in;
}

void expect_fused(const Case& c, uint64_t seed) {
  Compiled fused = expect_fused_matches(pooled_conv_backward(c), inputs_for(c, seed), 1e-4, 1e-4);
  const Graph& g = fused.exe->graph();
  ASSERT_EQ(count_nodes(g, NodeType::pooled_conv_grad), 1) << g.str();
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::conv2d_backward_weights)), 0);
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::conv2d_backward_data)), 0);
  EXPECT_EQ(fused.exe->report().fused("pooled_conv_grad"), 1);
}

struct NamedCase {
  const char* name;
  Case c;
};

// Case fields: n, c, h, w, o, k, pad, relu_mask, data_gradient, bias, dyp_channels_last.
const NamedCase kCases[] = {
    // LeNet's first layer: one input channel, 6 outputs, 5×5, padding 2, no dx (lanes (kw, o)).
    {"LeNetConv1", {5, 1, 28, 28, 6, 5, 2, true, false, true, true}},
    // LeNet's second layer: 6 -> 16, 5×5, no padding, dx too; the pooled gradient arrives in
    // NCHW (from the flatten's reshape), so it is gathered with strides.
    {"LeNetConv2WithDataGradient", {5, 6, 14, 14, 16, 5, 0, true, true, true, false}},
    // 3×3 with padding (dx reaches the border), odd extents (the pool drops the last row and
    // column, which get no gradient), no relu mask, no bias, a batch smaller than the threads.
    {"ThreeByThreePaddedOddExtentsNoMaskNoBias", {1, 3, 9, 11, 5, 3, 1, false, true, false, true}},
    // One input channel with dx asked for takes the general path.
    {"SingleInputChannelWithDataGradient", {3, 1, 12, 10, 16, 3, 1, true, true, true, true}},
};

class FusePooledConvGradCase : public ::testing::TestWithParam<NamedCase> {};

TEST_P(FusePooledConvGradCase, MatchesUnfusedAndFuses) {
  if (!kiln::testing::avx512_kernels_run()) GTEST_SKIP() << kiln::testing::kNoAvx512Kernels;
  expect_fused(GetParam().c, 1);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusePooledConvGradCase, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Ties: where a window's maximum appears more than once, the first pixel in window order must win
// (as in the one-pass pooling gradient), at each of the three compares; all-negative windows pass
// nothing through the relu mask.
TEST(FusePooledConvGrad, TiesGoToTheFirstPixelAndNegativeWindowsToNone) {
  if (!kiln::testing::avx512_kernels_run()) GTEST_SKIP() << kiln::testing::kNoAvx512Kernels;
  const Case c{.n = 2,
               .c = 2,
               .h = 8,
               .w = 8,
               .o = 4,
               .k = 3,
               .pad = 1,
               .relu_mask = true,
               .data_gradient = true,
               .bias = true,
               .dyp_channels_last = true};
  std::vector<Tensor> in = inputs_for(c, 5);
  // Per window, by (window + channel) mod 4: a four-way tie (a wins), a tie of b, c and d (b
  // wins), a tie of c and d (c wins), or all negative (no gradient).
  const Shape& rs = in[1].shape();
  std::vector<float> r(size_t(in[1].numel()));
  const float patterns[4][4] = {{0.25f, 0.25f, 0.25f, 0.25f},
                                {0.1f, 0.3f, 0.3f, 0.3f},
                                {0.1f, 0.1f, 0.3f, 0.3f},
                                {-0.5f, -0.5f, -0.5f, -0.5f}};
  for (int64_t i = 0; i < rs.numel(); ++i) {
    const int64_t w = i % rs[3], h = i / rs[3] % rs[2], ch = i / (rs[2] * rs[3]) % rs[1];
    const int64_t window = (h / 2) * (rs[3] / 2) + w / 2;
    r[size_t(i)] = patterns[(window + ch) % 4][(h % 2) * 2 + w % 2];
  }
  in[1] = channels_last(Tensor::from_vector(r, rs));
  Compiled fused = expect_fused_matches(pooled_conv_backward(c), in, 1e-4, 1e-4);
  EXPECT_EQ(count_nodes(fused.exe->graph(), NodeType::pooled_conv_grad), 1);
}

// Not fused: a reader of the dense gradient besides the convolution, more channels than the
// kernel takes, a strided convolution.
TEST(FusePooledConvGrad, LeavesOtherShapesAndReadersAlone) {
  if (!kiln::testing::avx512_kernels_run()) GTEST_SKIP() << kiln::testing::kNoAvx512Kernels;
  const Case base{.n = 2,
                  .c = 6,
                  .h = 14,
                  .w = 14,
                  .o = 16,
                  .k = 5,
                  .pad = 0,
                  .relu_mask = true,
                  .data_gradient = true,
                  .bias = true,
                  .dyp_channels_last = true};
  {
    GraphFn fn = [base](const std::vector<Tensor>& in) {
      std::vector<Tensor> out = pooled_conv_backward(base)(in);
      ops::Attrs pool = ops::PoolAttrs{.kernel = {2, 2}, .stride = {2, 2}};
      out.push_back(ops::relu_grad(
          ops::call_one_output(ops::OpKind::max_pool2d_grad, {in[0], in[1]}, pool), in[1]));
      return out;
    };
    Compiled c = expect_fused_matches(fn, inputs_for(base, 6), 1e-4, 1e-4);
    EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::pooled_conv_grad), 0);
  }
  {
    Case wide = base;
    wide.o = 32;
    Compiled c = expect_fused_matches(pooled_conv_backward(wide), inputs_for(wide, 7), 1e-4, 1e-4);
    EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::pooled_conv_grad), 0);
  }
  ops::ConvAttrs strided;
  strided.stride = {2, 2};
  EXPECT_FALSE(pooled_conv_grad_fits(Shape{2, 6, 14, 14}, Shape{16, 6, 5, 5}, strided, true));
  EXPECT_FALSE(pooled_conv_grad_fits(Shape{2, 6, 14, 14}, Shape{16, 6, 7, 7}, {}, true));
  EXPECT_TRUE(pooled_conv_grad_fits(Shape{2, 6, 14, 14}, Shape{16, 6, 5, 5}, {}, true));
}

// LeNet's first layer forward and backward in one graph: conv -> relu -> pool, and the pool's
// gradient into the convolution's weight gradient. The forward becomes conv_relu_pool (the relu
// output is never written), and the backward reads its winners.
GraphFn first_layer(bool bias) {
  return [bias](const std::vector<Tensor>& in) {
    const Tensor &x = in[0], &w = in[1], &dyp = in[2];
    const ops::Conv2dOptions opt{.padding = {2, 2}};
    Tensor r = ops::relu(ops::conv2d(x, w, bias ? in[3] : Tensor(), opt));
    Tensor p = ops::max_pool2d(r, {});
    ops::Attrs pool = ops::PoolAttrs{.kernel = {2, 2}, .stride = {2, 2}};
    Tensor g =
        ops::relu_grad(ops::call_one_output(ops::OpKind::max_pool2d_grad, {dyp, r}, pool), r);
    std::vector<Tensor> out = ops::conv2d_backward_weights(g, x, w.shape(), bias, opt);
    if (!bias) out.resize(1);
    out.insert(out.begin(), p);
    return out;
  };
}

TEST(FusePooledConvGrad, FirstLayerForwardKeepsWinnersInsteadOfTheReluOutput) {
  if (!kiln::testing::avx512_kernels_run()) GTEST_SKIP() << kiln::testing::kNoAvx512Kernels;
  struct Shape3 {
    int64_t n, h, w;
  };
  // Odd convolution extents (the pool drops the last row and column); one image (the kernel
  // then splits it into 8-row items across threads).
  for (Shape3 s : {Shape3{9, 27, 31}, Shape3{1, 28, 20}}) {
    for (bool bias : {true, false}) {
      std::vector<Tensor> in{random_tensor({s.n, 1, s.h, s.w}, 11), random_tensor({6, 1, 5, 5}, 12),
                             channels_last(random_tensor({s.n, 6, s.h / 2, s.w / 2}, 13))};
      if (bias) in.push_back(random_tensor({6}, 14, -0.2f, 0.2f));
      Compiled fused = expect_fused_matches(first_layer(bias), in, 1e-4, 1e-4);
      const Graph& g = fused.exe->graph();
      EXPECT_EQ(count_nodes(g, NodeType::conv_relu_pool), 1) << g.str();
      EXPECT_EQ(count_nodes(g, NodeType::pooled_conv_grad), 1) << g.str();
      EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::max_pool2d)), 0);
      EXPECT_EQ(fused.exe->report().fused("recording_pools"), 1);
      // The pooled forward output is the same maxima of the same convolution: bit for bit.
      Compiled plain = compile_and_run(first_layer(bias), in, {.fusion = false});
      EXPECT_EQ(fused.outputs[0].to_vector<float>(), plain.outputs[0].to_vector<float>());
    }
  }
}

// The relu output also read elsewhere (here: returned) keeps the plain forward.
TEST(FusePooledConvGrad, ReluOutputWithAnotherReaderKeepsThePlainForward) {
  if (!kiln::testing::avx512_kernels_run()) GTEST_SKIP() << kiln::testing::kNoAvx512Kernels;
  GraphFn fn = [](const std::vector<Tensor>& in) {
    std::vector<Tensor> out = first_layer(false)(in);
    out.push_back(ops::relu(ops::conv2d(in[0], in[1], Tensor(), {.padding = {2, 2}})));
    return out;
  };
  std::vector<Tensor> in{random_tensor({4, 1, 12, 12}, 21), random_tensor({6, 1, 5, 5}, 22),
                         channels_last(random_tensor({4, 6, 6, 6}, 23))};
  Compiled fused = expect_fused_matches(fn, in, 1e-4, 1e-4);
  EXPECT_EQ(count_nodes(fused.exe->graph(), NodeType::conv_relu_pool), 0);
  EXPECT_EQ(count_nodes(fused.exe->graph(), NodeType::pooled_conv_grad), 1);
}

// LeNet's second layer forward and backward: a 5×5 convolution of x [N, 6, 14, 14] to 16
// channels on oneDNN, relu, a 2×2 pool and a flatten.
GraphFn second_layer(bool pooled_also_returned) {
  return [pooled_also_returned](const std::vector<Tensor>& in) {
    const Tensor &x = in[0], &w = in[1], &b = in[2], &dflat = in[3];
    const int64_t n = x.dim(0);
    Tensor r = ops::relu(ops::conv2d(x, w, b, {}));
    Tensor p = ops::max_pool2d(r, {});
    Tensor flat = ops::reshape(p, Shape{n, p.numel() / n});
    ops::Attrs pool = ops::PoolAttrs{.kernel = {2, 2}, .stride = {2, 2}};
    Tensor dyp = ops::reshape(dflat, p.shape());
    Tensor g =
        ops::relu_grad(ops::call_one_output(ops::OpKind::max_pool2d_grad, {dyp, r}, pool), r);
    std::vector<Tensor> out = ops::conv2d_backward_weights(g, x, w.shape(), true, {});
    out.push_back(ops::conv2d_backward_data(g, w, x.shape(), {}));
    out.insert(out.begin(), flat);
    if (pooled_also_returned) out.push_back(p);
    return out;
  };
}

// x, w, b and the flattened output's gradient for a batch of n.
std::vector<Tensor> second_layer_inputs(int64_t n, uint64_t seed) {
  return {channels_last(random_tensor({n, 6, 14, 14}, seed)),
          random_tensor({16, 6, 5, 5}, seed + 1, -0.3f, 0.3f),
          random_tensor({16}, seed + 2, -0.1f, 0.1f), random_tensor({n, 400}, seed + 3)};
}

struct SecondLayerRun {
  Compiled fused, plain;
};

// The second layer fused and not: the forward must become `forward` (recording the pool's
// winners), the backward pooled_conv_grad, and the pooled output must be written row-major only
// where the flatten is its one reader. The pooled maxima are those of the same convolution: bit
// for bit.
SecondLayerRun run_second_layer(const std::vector<Tensor>& in, bool pooled_also_returned,
                                NodeType forward) {
  SecondLayerRun r{expect_fused_matches(second_layer(pooled_also_returned), in, 1e-4, 1e-4),
                   compile_and_run(second_layer(pooled_also_returned), in, {.fusion = false})};
  const Graph& g = r.fused.exe->graph();
  EXPECT_EQ(count_nodes(g, forward), 1) << g.str();
  EXPECT_EQ(count_nodes(g, NodeType::pooled_conv_grad), 1);
  EXPECT_EQ(r.fused.exe->report().fused("recording_pools"), 1);
  for (NodeId id : g.schedule()) {
    if (g.node(id).type != forward) continue;
    EXPECT_EQ(g.value(g.node(id).outputs[0]).meta.layout,
              pooled_also_returned ? ops::Layout::channels_last : ops::Layout::contiguous);
  }
  EXPECT_EQ(r.fused.outputs[0].to_vector<float>(), r.plain.outputs[0].to_vector<float>());
  if (pooled_also_returned) {
    EXPECT_EQ(r.fused.outputs.back().to_vector<float>(), r.plain.outputs.back().to_vector<float>());
  }
  return r;
}

// A oneDNN convolution writes r, and only the pool records the winners; the flatten that reads
// the pooled output becomes a view of it.
TEST(FusePooledConvGrad, SecondLayerPoolRecordsWinnersAndFlattensInPlace) {
  if (!kiln::testing::avx512_kernels_run()) GTEST_SKIP() << kiln::testing::kNoAvx512Kernels;
  for (bool pooled_also_returned : {false, true}) {
    run_second_layer(second_layer_inputs(5, 31), pooled_also_returned,
                     NodeType::max_pool_with_winners);
  }
}

// At batch 64 the second layer's relu output is 400 KiB: oneDNN's convolution runs 32 images
// at a time into the workspace and each half is pooled from there (conv_relu_pool), so the relu
// output is never whole.
TEST(FusePooledConvGrad, LargeSecondLayerForwardRunsInChunksThatArePooledAtOnce) {
  if (!kiln::testing::avx512_kernels_run()) GTEST_SKIP() << kiln::testing::kNoAvx512Kernels;
  EXPECT_EQ(conv_pool_chunk(64, 16 * 10 * 10 * 4), 32);
  EXPECT_EQ(conv_pool_chunk(5, 16 * 10 * 10 * 4), 0) << "small enough whole";
  EXPECT_EQ(conv_pool_chunk(67, 16 * 10 * 10 * 4), 0) << "no chunk of 16 or more images divides 67";
  for (bool pooled_also_returned : {false, true}) {
    const std::vector<Tensor> in = second_layer_inputs(64, 41);
    SecondLayerRun r = run_second_layer(in, pooled_also_returned, NodeType::conv_relu_pool);
    EXPECT_EQ(count_nodes(r.fused.exe->graph(), NodeType::max_pool_with_winners), 0);
    // The 400 KiB relu output is never in the arena.
    EXPECT_LT(r.fused.exe->report().arena_bytes, r.plain.exe->report().arena_bytes);
    // Each chunk's convolution output is in the workspace: the kernel writes it before it reads.
    Compiled poisoned = compile_and_run(second_layer(pooled_also_returned), in,
                                        {.fusion = true, .poison_workspaces = true});
    for (size_t i = 0; i < r.fused.outputs.size(); ++i) {
      EXPECT_EQ(poisoned.outputs[i].to_vector<float>(), r.fused.outputs[i].to_vector<float>())
          << "output " << i;
    }
  }
}

// The kernel refuses tensors it cannot read at bind time with an error naming the node.
TEST(FusePooledConvGrad, KernelRefusesUnsupportedOperands) {
  if (!kiln::testing::avx512_kernels_run()) GTEST_SKIP() << kiln::testing::kNoAvx512Kernels;
  Node node;
  node.type = NodeType::pooled_conv_grad;
  node.op = ops::OpKind::conv2d_backward_weights;
  node.attrs = ops::ConvAttrs{};  // the pool window is the kernel's fixed 2×2
  node.members = {"max_pool2d_grad", "conv2d_backward_weights"};
  // x in NCHW with 6 channels is not channels-last.
  std::vector<Tensor> in{random_tensor({2, 16, 5, 5}, 1),
                         channels_last(random_tensor({2, 16, 10, 10}, 2)),
                         random_tensor({2, 6, 14, 14}, 3), Tensor()};
  std::vector<Tensor> out{Tensor::empty({16, 6, 5, 5}, DType::f32)};
  EXPECT_FALSE(can_run_pooled_conv_grad(node, in, out));
  EXPECT_THROW(
      {
        try {
          make_pooled_conv_grad_kernel(node, in, out);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("fused[max_pool2d_grad,conv2d_backward_weights]"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  in[2] = channels_last(in[2]);
  EXPECT_TRUE(can_run_pooled_conv_grad(node, in, out));
}

}  // namespace
}  // namespace kiln::graph::fuse_pooled_conv_grad_test
