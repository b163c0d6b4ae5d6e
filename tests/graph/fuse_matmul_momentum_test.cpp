// Fusion (e): a matmul's weight gradient accumulated straight into momentum SGD's velocity.
#include "graph_test_util.h"

namespace kiln::graph::fuse_matmul_momentum_test {
namespace {
using namespace testing;

struct TrainedMlp {
  std::vector<Tensor> params, velocities;
  std::vector<float> losses;
  int fused_nodes = 0;
  // The fused velocity nodes' momentum and weight decay, in schedule order.
  std::vector<std::pair<double, double>> velocity_attrs;
  int weight_shaped_values = 0;  // values some live node produces with a weight's shape
  // The output layer's weight p2, in schedule order: its fused velocity, the last matmul that
  // reads it (the backward's input gradient) and its parameter step (-1: not found).
  int velocity_pos = -1, last_reader_pos = -1, step_pos = -1;
  double step_weight_decay = -1;
};

// mlp_loss on the two halves of the batch, averaged (micro-batches, as a training step traces
// them): each weight's gradient is then the sum of two matmuls.
Tensor halves_loss(const std::vector<Tensor>& p, const Tensor& x, const Tensor& labels) {
  const int64_t half = x.dim(0) / 2;
  Tensor first = mlp_loss(p, ops::slice(x, 0, 0, half), ops::slice(labels, 0, 0, half));
  Tensor second =
      mlp_loss(p, ops::slice(x, 0, half, 2 * half), ops::slice(labels, 0, half, 2 * half));
  return ops::mul_scalar(ops::add(first, second), 0.5);
}

// The two-layer perceptron of graph_test_util.h trained 3 steps with momentum SGD.
TrainedMlp train(bool fusion, double weight_decay, bool nesterov, const LossFn& loss = mlp_loss) {
  std::vector<Tensor> params = mlp_params(12, 32, 5, 7);
  std::vector<Tensor> velocities;
  for (const Tensor& p : params) velocities.push_back(Tensor::zeros(p.shape()));
  Tensor x = random_tensor({16, 12}, 8), labels = random_labels(16, 5, 9);
  Tensor lr = Tensor::scalar(0.05);
  Executable exe(
      trace_momentum_step(loss, params, velocities, x, labels, lr, weight_decay, nesterov),
      {.fusion = fusion});
  TrainedMlp r;
  for (int s = 0; s < 3; ++s)
    r.losses.push_back(exe.run(std::vector<Tensor>{x, labels})[0].item<float>());
  r.params = params;
  r.velocities = velocities;
  r.fused_nodes = count_nodes(exe.graph(), NodeType::fused_update);
  const Graph& graph = exe.graph();
  const std::vector<NodeId> order = graph.schedule();
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& node = graph.node(order[i]);
    for (ValueId v : node.outputs) {
      const Shape& shape = graph.value(v).meta.shape;
      r.weight_shaped_values += shape == params[0].shape() || shape == params[2].shape();
    }
    auto is_p2 = [&](size_t k) {
      return k < node.inputs.size() && node.inputs[k] != kNoValue &&
             graph.value(node.inputs[k]).name == "p2";
    };
    if (node.type == NodeType::fused_update) {
      const auto& fused = node.attrs.as<ops::MatmulMomentumAttrs>();
      r.velocity_attrs.emplace_back(fused.momentum, fused.weight_decay);
    }
    if (node.type == NodeType::fused_update && is_p2(kFusedUpdateParam)) r.velocity_pos = int(i);
    if (node.op == ops::OpKind::matmul && (is_p2(0) || is_p2(1))) r.last_reader_pos = int(i);
    if (node.type == NodeType::op && node.op == ops::OpKind::sgd_update && is_p2(0)) {
      r.step_pos = int(i);
      r.step_weight_decay = node.attrs.as<ops::SgdAttrs>().weight_decay;
    }
  }
  return r;
}

TEST(FuseMatmulMomentum, BothWeightGradientsFuseAndTrainingMatches) {
  for (double wd : {0.0, 0.01}) {
    TrainedMlp plain = train(false, wd, false), fused = train(true, wd, false);
    EXPECT_EQ(plain.fused_nodes, 0);
    EXPECT_EQ(fused.fused_nodes, 2)
        << "the two weight matrices (biases come from a sum, not a matmul)";
    for (size_t s = 0; s < plain.losses.size(); ++s) {
      EXPECT_NEAR(fused.losses[s], plain.losses[s], 1e-6) << "step " << s << " wd " << wd;
    }
    expect_all_close(fused.params, plain.params, 1e-6, 1e-5, "parameters");
    expect_all_close(fused.velocities, plain.velocities, 1e-6, 1e-5, "velocities");
    // The weight gradients are never materialized.
    EXPECT_EQ(plain.weight_shaped_values, 2);
    EXPECT_EQ(fused.weight_shaped_values, 0);
    // The velocity has the weight decay; the parameter's step must not add it again.
    EXPECT_EQ(fused.step_weight_decay, 0.0);
  }
}

// The velocity's matmul waits only for its operands; the parameter's step waits for the
// backward's last read of the old weight, and runs right after it. One fused node had to wait
// for both.
TEST(FuseMatmulMomentum, VelocityRunsBeforeTheWeightsLastReaderAndTheStepAfterIt) {
  TrainedMlp fused = train(true, 0.01, false);
  ASSERT_GE(fused.velocity_pos, 0);
  ASSERT_GE(fused.step_pos, 0);
  EXPECT_LT(fused.velocity_pos, fused.last_reader_pos);
  EXPECT_EQ(fused.step_pos, fused.last_reader_pos + 1);
}

// A gradient summed over two halves of the batch: each half's product accumulates into the
// velocity on its own, the first scaling it by μ and adding wd·p, the second adding only itself.
TEST(FuseMatmulMomentum, SummedProductsEachAccumulateIntoTheVelocity) {
  for (double wd : {0.0, 0.01}) {
    TrainedMlp plain = train(false, wd, false, halves_loss);
    TrainedMlp fused = train(true, wd, false, halves_loss);
    EXPECT_EQ(fused.fused_nodes, 4) << "two products for each of the two weights";
    EXPECT_EQ(fused.weight_shaped_values, 0) << "no product and no sum of them is materialized";
    EXPECT_EQ(plain.weight_shaped_values, 6);
    for (size_t s = 0; s < plain.losses.size(); ++s) {
      EXPECT_NEAR(fused.losses[s], plain.losses[s], 1e-6) << "step " << s << " wd " << wd;
    }
    expect_all_close(fused.params, plain.params, 1e-6, 1e-5, "parameters");
    expect_all_close(fused.velocities, plain.velocities, 1e-6, 1e-5, "velocities");
    // Per weight: one node scales by μ with the decay, one adds (momentum 1, no decay).
    int scaling = 0, adding = 0;
    for (auto [momentum, decay] : fused.velocity_attrs) {
      scaling += momentum == 0.9 && decay == wd;
      adding += momentum == 1.0 && decay == 0.0;
    }
    EXPECT_EQ(scaling, 2);
    EXPECT_EQ(adding, 2);
  }
}

// Nesterov needs the gradient itself after the velocity update: no fusion, same result.
TEST(FuseMatmulMomentum, NesterovIsLeftAlone) {
  TrainedMlp plain = train(false, 0.0, true), fused = train(true, 0.0, true);
  EXPECT_EQ(fused.fused_nodes, 0);
  expect_all_close(fused.params, plain.params, 1e-6, 1e-5, "parameters");
}

}  // namespace
}  // namespace kiln::graph::fuse_matmul_momentum_test
