#include "graph_test_util.h"
#include "kiln/graph/passes/passes.h"

namespace kiln::graph {
namespace {
using namespace testing;

// conv -> BN -> relu -> conv -> loss, trained one SGD step on the two convolutions' weights.
// `extra_reader` also adds the mean of the relu output to the loss (an elementwise reader).
// Channels: 16; the relu output is [batch, 16, size, size] f32.
struct ConvBnConv {
  int64_t batch, size;
  bool extra_reader = false;

  std::vector<Tensor> params() const {
    return clone_all({random_tensor({16, 3, 3, 3}, 1, -0.3f, 0.3f),
                      random_tensor({16}, 2, 0.5f, 1.5f), random_tensor({16}, 3, -0.2f, 0.2f),
                      random_tensor({8, 16, 3, 3}, 4, -0.2f, 0.2f)});
  }
  LossFn loss() const {
    const bool extra = extra_reader;
    return [extra](const std::vector<Tensor>& p, const Tensor& x, const Tensor&) {
      Tensor rm = Tensor::zeros({16}), rv = Tensor::ones({16});
      Tensor c1 = ops::conv2d(x, p[0], Tensor(), {.padding = {1, 1}});
      Tensor r = ops::relu(ops::batch_norm(c1, p[1], p[2], rm, rv, true, 0.9, 1e-5)[0]);
      Tensor l = ops::mean(ops::square(ops::conv2d(r, p[3], Tensor(), {.padding = {1, 1}})));
      return extra ? ops::add(l, ops::mean(r)) : l;
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

}  // namespace
}  // namespace kiln::graph
