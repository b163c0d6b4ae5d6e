#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"
#include "testing/dnnl_verbose.h"

namespace kiln::graph::fuse_epilogues_test {
namespace {
using namespace testing;

const Node* only_epilogue(const Graph& g) {
  const Node* found = nullptr;
  for (NodeId n : g.schedule()) {
    if (g.node(n).type == NodeType::epilogue) {
      if (found) return nullptr;
      found = &g.node(n);
    }
  }
  return found;
}

TEST(FuseEpilogues, MatmulBiasRelu) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::relu(ops::add(ops::matmul(in[0], in[1], false, true), in[2]))};
  };
  std::vector<Tensor> in{random_tensor({16, 20}, 1), random_tensor({12, 20}, 2),
                         random_tensor({12}, 3)};
  Compiled c = expect_fused_matches(fn, in, 1e-5, 1e-5);
  const Node* e = only_epilogue(c.exe->graph());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->members, (std::vector<std::string>{"matmul", "add", "relu"}));
  EXPECT_EQ(c.exe->graph().num_live_nodes(), 1u);
}

TEST(FuseEpilogues, ConvBiasRelu) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::relu(ops::conv2d(in[0], in[1], in[2], {.padding = {2, 2}}))};
  };
  std::vector<Tensor> in{random_tensor({3, 2, 12, 12}, 1), random_tensor({6, 2, 5, 5}, 2),
                         random_tensor({6}, 3)};
  Compiled c = expect_fused_matches(fn, in, 1e-5, 1e-4);
  const Node* e = only_epilogue(c.exe->graph());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->post_ops, (std::vector<PostOp>{PostOp::relu}));
}

// Small weights reach the primitive's blocked layout through a BlockedCopy, not a reorder
// primitive (whose first build leaves 0.7 MiB of libdnnl's code resident), every step.
TEST(FuseEpilogues, ConvStagesSmallWeightsWithoutAReorderPrimitive) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::relu(ops::conv2d(in[0], in[1], in[2], {}))};
  };
  // LeNet's second convolution at a batch no other test uses.
  std::vector<Tensor> in{channels_last(random_tensor({5, 6, 14, 14}, 1)),
                         random_tensor({16, 6, 5, 5}, 2), random_tensor({16}, 3)};
  Compiled c;
  const std::string log =
      kiln::testing::dnnl_verbose_output([&] { c = expect_fused_matches(fn, in, 1e-5, 1e-4); });
  ASSERT_NE(only_epilogue(c.exe->graph()), nullptr);
  EXPECT_NE(log.find("convolution,"), std::string::npos) << log;
  EXPECT_EQ(log.find(",reorder,"), std::string::npos) << log;
  // A second step copies the weights again: the result follows new weights.
  in[1] = random_tensor({16, 6, 5, 5}, 4);
  expect_all_close(c.exe->run(in), fn(in), 1e-5, 1e-4, "second step, new weights");
}

// One input channel (LeNet's first layer): the fused conv + relu runs the hand-written
// single-channel kernel (kernels/single_channel_conv.cpp); it must match a plain loop.
TEST(FuseEpilogues, SingleInputChannelConvBiasReluMatchesPlainLoop) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::relu(ops::conv2d(in[0], in[1], in[2], {.padding = {2, 2}}))};
  };
  const int64_t N = 3, O = 6, H = 11, W = 13, K = 5, P = 2;
  std::vector<Tensor> in{random_tensor({N, 1, H, W}, 4), random_tensor({O, 1, K, K}, 5),
                         random_tensor({O}, 6)};
  Compiled c = expect_fused_matches(fn, in, 1e-5, 1e-4);
  const Node* e = only_epilogue(c.exe->graph());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->post_ops, (std::vector<PostOp>{PostOp::relu}));
  const float *x = in[0].data<float>(), *w = in[1].data<float>(), *b = in[2].data<float>();
  const Tensor& y = c.outputs[0];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < W; ++j) {
          double acc = b[o];
          for (int64_t kh = 0; kh < K; ++kh)
            for (int64_t kw = 0; kw < K; ++kw) {
              const int64_t r = i + kh - P, s = j + kw - P;
              if (r >= 0 && r < H && s >= 0 && s < W) {
                acc += double(x[(n * H + r) * W + s]) * double(w[(o * K + kh) * K + kw]);
              }
            }
          const float got = y.data<float>()[n * y.strides()[0] + o * y.strides()[1] +
                                            i * y.strides()[2] + j * y.strides()[3]];
          ASSERT_NEAR(got, std::max(acc, 0.0), 1e-4) << n << " " << o << " " << i << " " << j;
        }
}

TEST(FuseEpilogues, ConvResidualAddRelu) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor shortcut = ops::conv2d(in[0], in[2], Tensor(), {});  // 1x1, channels-last
    Tensor y = ops::conv2d(in[0], in[1], Tensor(), {.padding = {1, 1}});
    return std::vector<Tensor>{ops::relu(ops::add(y, shortcut))};
  };
  std::vector<Tensor> in{random_tensor({2, 4, 8, 8}, 1), random_tensor({8, 4, 3, 3}, 2),
                         random_tensor({8, 4, 1, 1}, 3)};
  Compiled c = expect_fused_matches(fn, in, 1e-5, 1e-4);
  const Node* e = only_epilogue(c.exe->graph());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->post_ops, (std::vector<PostOp>{PostOp::add_residual, PostOp::relu}));
}

TEST(FuseEpilogues, ProductReadByOthersIsNotFused) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor z = ops::matmul(in[0], in[1]);
    return std::vector<Tensor>{ops::relu(z), ops::neg(z)};
  };
  std::vector<Tensor> in{random_tensor({4, 5}, 1), random_tensor({5, 6}, 2)};
  Compiled c = expect_fused_matches(fn, in);
  EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::epilogue), 0);
}

}  // namespace
}  // namespace kiln::graph::fuse_epilogues_test

namespace kiln::graph::fuse_epilogues_test {
namespace {
using namespace testing;

ops::Attrs pool_attrs() {
  return ops::PoolAttrs{.kernel = {2, 2}, .stride = {2, 2}};
}

// relu -> max_pool backwards: max_pool2d_grad then relu_grad on the pool's input, one pass.
TEST(FuseEpilogues, MaxPoolGradWithReluGrad) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor dx = ops::call_one_output(ops::OpKind::max_pool2d_grad, {in[0], in[1]}, pool_attrs());
    return std::vector<Tensor>{ops::relu_grad(dx, in[1])};
  };
  // A relu output in channels-last (many zeros, so ties and masked winners both occur).
  Tensor x = ops::relu(
      ops::conv2d(random_tensor({8, 3, 12, 12}, 1), random_tensor({6, 3, 1, 1}, 2), Tensor(), {}));
  Tensor dy = random_tensor({8, 6, 6, 6}, 3);
  Compiled c = expect_fused_matches(fn, {dy, x}, 0, 0);
  const Node* e = only_epilogue(c.exe->graph());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->members, (std::vector<std::string>{"max_pool2d_grad", "relu_grad"}));
}

// The graph's one-pass pooling gradient gives exactly what the op's kernel gives, for any
// layout and for sizes the windows do not tile.
TEST(MaxPoolGradKernel, MatchesTheOpKernelExactly) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{
        ops::call_one_output(ops::OpKind::max_pool2d_grad, {in[0], in[1]}, pool_attrs())};
  };
  for (bool channels_last : {false, true}) {
    Tensor x = random_tensor({3, 5, 9, 7}, 4);
    if (channels_last) x = ops::relu(ops::conv2d(x, random_tensor({5, 5, 1, 1}, 5), Tensor(), {}));
    Tensor dy = random_tensor({3, 5, 4, 3}, 6);
    std::vector<Tensor> eager = fn({dy, x});
    Compiled c = compile_and_run(fn, {dy, x}, {});
    expect_all_close(c.outputs, eager, 0, 0, channels_last ? "channels-last" : "contiguous");
  }
}

}  // namespace
}  // namespace kiln::graph::fuse_epilogues_test
