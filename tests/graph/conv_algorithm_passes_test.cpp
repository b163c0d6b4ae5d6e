// Graph mode follows Context::conv_algorithm: the passes that hand a convolution to Kiln's
// Winograd kernel (bn+relu into it) or to a oneDNN primitive with post-ops (epilogue fusion) do
// so only where the setting allows, and a compiled convolution gives eager mode's bits under
// each setting.
#include "graph_test_util.h"
#include "kiln/core/context.h"
#include "kiln/ops/kernels/conv_winograd.h"

namespace kiln::graph::conv_algorithm_passes_test {
namespace {
using namespace testing;

class ConvAlgorithmPasses : public ::testing::Test {
 protected:
  static bool winograd_built() {
    return ops::winograd_3x3_fits({1, 16, 8, 8}, {16, 16, 3, 3}, {.padding = {1, 1}});
  }
  void TearDown() override { set_context(saved_); }
  void use(const std::string& algorithm) {
    Context c = saved_;
    c.conv_algorithm = algorithm;
    set_context(c);
  }
  Context saved_ = get_context();
};

// conv -> BN -> relu -> conv, one SGD step; how many convolutions read relu(batch_norm(x)) on
// the fly (Kiln's Winograd kernel only) under `algorithm`.
int bn_relu_into_conv_count(const std::string& algorithm, int64_t batch) {
  const int64_t c = 16;
  std::vector<Tensor> params{random_tensor({c, c, 3, 3}, 1, -0.2f, 0.2f),
                             random_tensor({c}, 2, 0.5f, 1.5f), random_tensor({c}, 3),
                             random_tensor({c, c, 3, 3}, 4, -0.2f, 0.2f)};
  std::vector<Tensor> stats{Tensor::zeros({c}), Tensor::ones({c})};
  auto loss = [&](const std::vector<Tensor>& in) {
    Tensor h = ops::conv2d(in[0], params[0], Tensor(), {.padding = {1, 1}});
    h = ops::batch_norm(h, params[1], params[2], stats[0], stats[1], true, 0.9, 1e-5)[0];
    h = ops::conv2d(ops::relu(h), params[3], Tensor(), {.padding = {1, 1}});
    return ops::mean(ops::square(h));
  };
  Tensor x = channels_last(random_tensor({batch, c, 16, 17}, 5));
  Context context = get_context();
  context.conv_algorithm = algorithm;
  set_context(context);
  Executable exe(
      trace_sgd_step(loss, params, {{"x", x}}, Tensor::scalar(0.05), numbered("s", stats)),
      {.fusion = true, .block_layout = false});
  exe.run(std::vector<Tensor>{x});
  return exe.report().fused("bn_relu_conv");
}

// Batch 8 at 16x17 has 2,176 output pixels (Winograd pays under auto), batch 1 has 272.
TEST_F(ConvAlgorithmPasses, BnReluIntoConvOnlyWhereWinogradIsChosen) {
  if (!winograd_built()) GTEST_SKIP() << "no Winograd kernel in this build";
  EXPECT_EQ(bn_relu_into_conv_count("auto", 8), 2);
  EXPECT_EQ(bn_relu_into_conv_count("direct", 8), 0);
  EXPECT_EQ(bn_relu_into_conv_count("winograd", 8), 2);
  EXPECT_EQ(bn_relu_into_conv_count("auto", 1), 0);
  EXPECT_EQ(bn_relu_into_conv_count("winograd", 1), 2);
}

// A fused epilogue runs oneDNN's direct kernel with post-ops: under "winograd" the convolution
// stays unfused (and runs Winograd), under the others it fuses.
TEST_F(ConvAlgorithmPasses, EpilogueFusionLeavesWinogradConvolutionsUnderWinograd) {
  if (!winograd_built()) GTEST_SKIP() << "no Winograd kernel in this build";
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::relu(ops::conv2d(in[0], in[1], in[2], {.padding = {1, 1}}))};
  };
  std::vector<Tensor> in{random_tensor({2, 16, 8, 8}, 1), random_tensor({16, 16, 3, 3}, 2),
                         random_tensor({16}, 3)};
  for (const char* algorithm : {"auto", "direct", "winograd"}) {
    use(algorithm);
    Compiled fused = compile_and_run(fn, in, {.fusion = true});
    const bool winograd = std::string(algorithm) == "winograd";
    EXPECT_EQ(fused.exe->report().fused("epilogues"), winograd ? 0 : 1) << algorithm;
    if (winograd) {
      EXPECT_EQ(fused.outputs[0].to_vector<float>(), fn(in)[0].to_vector<float>());
    }
  }
}

// Unfused, a compiled convolution and its two gradients run the kernels eager mode runs: the
// same bits under each setting (and "winograd" and "direct" differ, so the setting is read).
TEST_F(ConvAlgorithmPasses, UnfusedGraphGivesEagerBitsUnderEachSetting) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    const ops::Conv2dOptions o{.padding = {1, 1}};
    return std::vector<Tensor>{
        ops::conv2d(in[0], in[1], Tensor(), o),
        ops::conv2d_backward_data(in[2], in[1], in[0].shape(), o),
        ops::conv2d_backward_weights(in[2], in[0], in[1].shape(), false, o)[0]};
  };
  std::vector<Tensor> in{channels_last(random_tensor({2, 32, 32, 32}, 1)),
                         random_tensor({32, 32, 3, 3}, 2),
                         channels_last(random_tensor({2, 32, 32, 32}, 3))};
  std::vector<std::vector<float>> per_setting;
  for (const char* algorithm : {"auto", "direct", "winograd"}) {
    use(algorithm);
    std::vector<Tensor> eager = fn(in);
    Compiled graph = compile_and_run(fn, in, {.fusion = false});
    for (size_t i = 0; i < eager.size(); ++i) {
      EXPECT_EQ(graph.outputs[i].to_vector<float>(), eager[i].to_vector<float>())
          << algorithm << " output " << i;
    }
    per_setting.push_back(eager[0].to_vector<float>());
  }
  if (winograd_built()) {
    EXPECT_NE(per_setting[1], per_setting[2]);  // direct vs winograd
    EXPECT_EQ(per_setting[0], per_setting[2]);  // auto is winograd at 2,048 output pixels
  }
}

}  // namespace
}  // namespace kiln::graph::conv_algorithm_passes_test
