#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::stream_stores_test {
namespace {
using namespace testing;

// conv -> BN -> relu -> conv -> loss, trained one SGD step on the convolutions' weights and the
// batch norms' parameters. `extra_reader` also adds the mean of the relu output r to the loss (an
// elementwise reader). `residual`: a ResNet block instead, r -> conv -> BN -> add r -> relu -> conv
// -> loss, where the second BN adds r back after the convolution has read it. `early_residual`:
// that BN adds r but its convolution reads x, and another convolution reads r only after it.
// Channels: 16; r is [batch, 16, size, size] f32.
struct ConvBnConv {
  int64_t batch, size;
  bool extra_reader = false;
  bool residual = false;
  bool early_residual = false;

  std::vector<Tensor> params() const {
    return clone_all(
        {random_tensor({16, 3, 3, 3}, 1, -0.3f, 0.3f), random_tensor({16}, 2, 0.5f, 1.5f),
         random_tensor({16}, 3, -0.2f, 0.2f), random_tensor({8, 16, 3, 3}, 4, -0.2f, 0.2f),
         random_tensor({16, 16, 3, 3}, 6, -0.2f, 0.2f), random_tensor({16}, 7, 0.5f, 1.5f),
         random_tensor({16}, 8, -0.2f, 0.2f), random_tensor({16, 3, 3, 3}, 9, -0.3f, 0.3f)});
  }
  LossFn loss() const {
    const ConvBnConv net = *this;
    return [net](const std::vector<Tensor>& p, const Tensor& x, const Tensor&) {
      const ops::Conv2dOptions same = {.padding = {1, 1}};
      auto bn = [](const Tensor& t, const Tensor& gamma, const Tensor& beta) {
        Tensor rm = Tensor::zeros({16}), rv = Tensor::ones({16});
        return ops::batch_norm(t, gamma, beta, rm, rv, true, 0.9, 1e-5)[0];
      };
      Tensor r = ops::relu(bn(ops::conv2d(x, p[0], Tensor(), same), p[1], p[2]));
      Tensor top = r;
      if (net.residual || net.early_residual) {
        Tensor c = ops::conv2d(net.residual ? r : x, net.residual ? p[4] : p[7], Tensor(), same);
        top = ops::relu(ops::add(bn(c, p[5], p[6]), r));
      }
      Tensor l = ops::mean(ops::square(ops::conv2d(top, p[3], Tensor(), same)));
      if (net.early_residual) {
        l = ops::add(l, ops::mean(ops::square(ops::conv2d(r, p[3], Tensor(), same))));
      }
      return net.extra_reader ? ops::add(l, ops::mean(r)) : l;
    };
  }
};

struct StepResult {
  int streaming_stores = 0;
  int marked_nodes = 0;
  float loss = 0;
  std::vector<Tensor> params;
};

StepResult train_one_step(const ConvBnConv& net, bool fusion) {
  StepResult out;
  out.params = net.params();
  Tensor x = channels_last(random_tensor({net.batch, 3, net.size, net.size}, 5));
  Tensor labels = Tensor::zeros({net.batch}, DType::i32);
  Tensor lr = Tensor::scalar(0.05);
  Executable exe(trace_step(net.loss(), out.params, x, labels, lr), {.fusion = fusion});
  out.streaming_stores = exe.report().streaming_stores;
  for (NodeId n : exe.graph().schedule()) out.marked_nodes += exe.graph().node(n).stream_output;
  out.loss = exe.run(std::vector<Tensor>{x, labels})[0].item<float>();
  return out;
}

// 16·16·32·32 f32 = 1 MiB, the smallest output the pass streams; read by the next convolution,
// its backward-weights and the fused backward (which finds the relu mask from x, not from r).
TEST(StreamStores, MarksALargeBatchNormOutputThatOnlyConvolutionsRead) {
  const ConvBnConv net{.batch = 16, .size = 32};
  StepResult fused = train_one_step(net, true);
  EXPECT_EQ(fused.streaming_stores, 1);
  EXPECT_EQ(fused.marked_nodes, 1);
  StepResult plain = train_one_step(net, false);
  EXPECT_EQ(plain.streaming_stores, 0);
  EXPECT_NEAR(fused.loss, plain.loss, 1e-5);
  expect_all_close(fused.params, plain.params, 1e-6, 1e-5, "params after one step");
}

TEST(StreamStores, LeavesOutputsAnElementwiseOpReadsOrThatStayCached) {
  StepResult also_elementwise =
      train_one_step({.batch = 16, .size = 32, .extra_reader = true}, true);
  EXPECT_EQ(also_elementwise.streaming_stores, 0);
  StepResult small = train_one_step({.batch = 8, .size = 32}, true);  // 0.5 MiB
  EXPECT_EQ(small.streaming_stores, 0);
}

// r is read by the block's first convolution (and its backward), and added back by the block's
// second batch norm after that convolution: streamed. The block's output is also read by the
// fused backward for its relu mask: not streamed.
TEST(StreamStores, MarksABlockInputThatABatchNormAddsBackAfterAConvolution) {
  const ConvBnConv net{.batch = 16, .size = 32, .residual = true};
  StepResult fused = train_one_step(net, true);
  EXPECT_EQ(fused.streaming_stores, 1);
  StepResult plain = train_one_step(net, false);
  EXPECT_NEAR(fused.loss, plain.loss, 1e-5);
  expect_all_close(fused.params, plain.params, 1e-6, 1e-5, "params after one step");
}

TEST(StreamStores, LeavesAResidualThatIsAddedBeforeAnyConvolutionReadsIt) {
  StepResult early = train_one_step({.batch = 16, .size = 32, .early_residual = true}, true);
  EXPECT_EQ(early.streaming_stores, 0);
}

}  // namespace
}  // namespace kiln::graph::stream_stores_test
