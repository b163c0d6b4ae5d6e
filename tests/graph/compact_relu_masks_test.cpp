// The relu masks pass: a relu output the backward reads last only for the relu's gradient is
// kept as bytes after its last other reader.
#include "graph_test_util.h"
#include "kiln/graph/dump.h"

namespace kiln::graph::compact_relu_masks_test {
namespace {
using namespace testing;

struct Trained {
  std::vector<Tensor> params;
  std::vector<float> losses;
  int masks = 0;
  int64_t arena_bytes = 0;
  std::string dot;  // the compiled graph
};

// The perceptron of graph_test_util.h, `hidden` wide, trained 3 steps with momentum SGD on a
// batch of 256 (with fusion).
Trained train(int64_t hidden, bool relu_masks) {
  std::vector<Tensor> params = mlp_params(48, hidden, 10, 21);
  std::vector<Tensor> velocities;
  for (const Tensor& p : params) velocities.push_back(Tensor::zeros(p.shape()));
  Tensor x = random_tensor({256, 48}, 22), labels = random_labels(256, 10, 23);
  Tensor lr = Tensor::scalar(0.05);
  Executable exe(trace_momentum_step(mlp_loss, params, velocities, x, labels, lr, 0.0, false),
                 {.fusion = true, .relu_masks = relu_masks});
  Trained r;
  for (int s = 0; s < 3; ++s)
    r.losses.push_back(exe.run(std::vector<Tensor>{x, labels})[0].item<float>());
  r.params = params;
  r.masks = count_nodes(exe.graph(), NodeType::relu_mask);
  r.arena_bytes = exe.report().arena_bytes;
  r.dot = to_dot(exe.graph(), "step");
  return r;
}

// The hidden activation, [256, 1024] f32 (1 MiB), waits through the output layer's weight
// gradient and its input gradient [256, 1024] for the relu_grad of the bias gradient.
TEST(CompactReluMasks, LargeActivationBecomesBytesWithBitIdenticalTraining) {
  Trained plain = train(1024, false), masked = train(1024, true);
  EXPECT_EQ(plain.masks, 0);
  EXPECT_EQ(masked.masks, 1);
  EXPECT_EQ(masked.losses, plain.losses);
  for (size_t i = 0; i < plain.params.size(); ++i) {
    EXPECT_EQ(masked.params[i].to_vector<float>(), plain.params[i].to_vector<float>())
        << "parameter " << i;
  }
  // The activation (1 MiB) was alive with the input gradient (1 MiB); now its 0.25 MiB mask is,
  // and the peak moves to the weight gradient's matmul (the activation and its scratchpad).
  EXPECT_LT(masked.arena_bytes, plain.arena_bytes - (int64_t(1) << 20) / 4);
  // The graph dump names the mask (a pass's node, not a fused kernel).
  EXPECT_NE(masked.dot.find("label=\"relu_mask\""), std::string::npos) << masked.dot;
}

// A small activation is not worth a launch and a pass over it.
TEST(CompactReluMasks, SmallActivationStaysF32) {
  EXPECT_EQ(train(32, true).masks, 0);
}

}  // namespace
}  // namespace kiln::graph::compact_relu_masks_test
