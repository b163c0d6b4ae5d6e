#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"
#include "kiln/ops/cpu_support.h"
#include "testing/cpu_features.h"

namespace kiln::graph::fuse_reductions_test {
namespace {
using namespace testing;

TEST(FuseReductions, ElementwiseChainIntoRowSum) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::sum(ops::mul(ops::exp(in[0]), in[1]), {1})};
  };
  std::vector<Tensor> in{random_tensor({300, 500}, 1), random_tensor({300, 500}, 2)};
  Compiled c = expect_fused_matches(fn, in, 1e-3, 1e-5);
  const Graph& g = c.exe->graph();
  EXPECT_EQ(g.num_live_nodes(), 1u);
  ASSERT_EQ(count_nodes(g, NodeType::fused_reduction), 1);
  EXPECT_EQ(g.node(g.schedule()[0]).members, (std::vector<std::string>{"exp", "mul", "sum"}));
}

TEST(FuseReductions, BiasGradientSharesThePassWithItsOtherReader) {
  // t feeds both sum_to_shape (a bias gradient) and a matmul: the fused kernel writes t once and
  // reduces it in the same pass.
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor t = ops::relu_grad(in[0], in[1]);
    return std::vector<Tensor>{ops::sum_to_shape(t, Shape{64}), ops::matmul(t, in[2], true, false)};
  };
  std::vector<Tensor> in{random_tensor({512, 64}, 1), random_tensor({512, 64}, 2),
                         random_tensor({512, 8}, 3)};
  Compiled c = expect_fused_matches(fn, in, 1e-4, 1e-5);
  const Graph& g = c.exe->graph();
  ASSERT_EQ(count_nodes(g, NodeType::fused_reduction), 1);
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::relu_grad)), 0);
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::sum_to_shape)), 0);
}

// Mixed precision: a bf16 layer's relu_grad and bias gradient fuse too. The chain runs in f32
// and only what is stored is rounded, so the fused result is held against the f32 computation
// of the same bf16 inputs (the unfused graph rounds t to bf16 before summing: bf16 tolerance).
TEST(FuseReductions, Bf16BiasGradientFusesAndSumsInF32) {
  if (!ops::arithmetic_available(DType::bf16)) GTEST_SKIP() << kiln::testing::kNoBf16Arithmetic;
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor t = ops::relu_grad(in[0], in[1]);
    return std::vector<Tensor>{ops::sum_to_shape(t, Shape{1024}),
                               ops::matmul(t, in[2], true, false)};
  };
  std::vector<Tensor> in;
  for (uint64_t seed : {1, 2})
    in.push_back(ops::cast(random_tensor({512, 1024}, seed), DType::bf16));
  in.push_back(ops::cast(random_tensor({512, 4}, 3), DType::bf16));
  Compiled c = expect_fused_matches(fn, in, 0.1, 1e-2);
  const Graph& g = c.exe->graph();
  ASSERT_EQ(count_nodes(g, NodeType::fused_reduction), 1);
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::sum_to_shape)), 0);
  EXPECT_EQ(c.outputs[0].dtype(), DType::bf16);
  std::vector<Tensor> wide;
  for (const Tensor& t : in) wide.push_back(ops::cast(t, DType::f32));
  const Tensor reference = ops::sum_to_shape(ops::relu_grad(wide[0], wide[1]), Shape{1024});
  // f32 sums of the same bf16 values, rounded once: within bf16's half-ulp of the reference.
  expect_all_close({ops::cast(c.outputs[0], DType::f32)}, {reference}, 1e-3, 4e-3,
                   "fused bf16 vs f32 reference");
}

// Large enough that the kernel splits the work among threads, each way it can: the MLP's bias
// gradient (one output row, the rows shared out, the chain's result also kept); a column sum
// whose chain result lives only in per-thread chunks; rows longer than a chunk; and several
// outer slices, one thread each, reduced chunk by chunk.
TEST(FuseReductions, SplitAmongThreadsMatchesUnfused) {
  GraphFn bias_gradient = [](const std::vector<Tensor>& in) {
    Tensor t = ops::relu_grad(in[0], in[1]);
    return std::vector<Tensor>{ops::sum_to_shape(t, Shape{1024}),
                               ops::matmul(t, in[2], true, false)};
  };
  Compiled c = expect_fused_matches(
      bias_gradient,
      {random_tensor({512, 1024}, 1), random_tensor({512, 1024}, 2), random_tensor({512, 4}, 3)},
      1e-4, 1e-5);
  EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::fused_reduction), 1);
  GraphFn column_sum = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::sum(ops::exp(in[0]), {0})};
  };
  for (const Shape& shape : {Shape{2000, 700}, Shape{3, 40000}}) {
    c = expect_fused_matches(column_sum, {random_tensor(shape, 4)}, 1e-4, 1e-5);
    EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::fused_reduction), 1) << shape.str();
  }
  GraphFn middle_sum = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::sum(ops::square(in[0]), {1})};
  };
  c = expect_fused_matches(middle_sum, {random_tensor({4, 2000, 40}, 5)}, 1e-4, 1e-5);
  EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::fused_reduction), 1);
}

TEST(FuseReductions, ChannelsLastSpatialMean) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor y = ops::conv2d(in[0], in[1], Tensor(), {.padding = {1, 1}});  // channels-last
    return std::vector<Tensor>{ops::mean(ops::tanh(y), {2, 3})};
  };
  std::vector<Tensor> in{random_tensor({4, 3, 9, 9}, 1), random_tensor({5, 3, 3, 3}, 2)};
  Compiled c = expect_fused_matches(fn, in, 1e-5, 1e-4);
  EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::fused_reduction), 1);
}

// Mixed precision's channels-last bf16 activations (MobileNetV2's ReLU6 before its global average
// pool at O2): read in memory order like f32 ones.
TEST(FuseReductions, ChannelsLastBf16SpatialMean) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor y = ops::conv2d(in[0], in[1], Tensor(), {.padding = {1, 1}});  // channels-last
    Tensor six = Tensor::scalar(6.0, DType::bf16);
    return std::vector<Tensor>{ops::mean(ops::minimum(ops::cast(y, DType::bf16), six), {2, 3})};
  };
  std::vector<Tensor> in{random_tensor({4, 3, 9, 9}, 1), random_tensor({16, 3, 3, 3}, 2)};
  Compiled c = expect_fused_matches(fn, in, 1e-2, 1e-2);
  EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::fused_reduction), 1);
}

TEST(FuseReductions, ScalarOperandsAndFullReduction) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::mean(ops::square(ops::sub(in[0], in[1])))};
  };
  std::vector<Tensor> in{random_tensor({70000}, 1), random_tensor({}, 2)};
  Compiled c = expect_fused_matches(fn, in, 1e-5, 1e-4);
  EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::fused_reduction), 1);
}

TEST(FuseReductions, ScatteredAxesStayUnfused) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::sum(ops::exp(in[0]), {0, 2})};
  };
  Compiled c = expect_fused_matches(fn, {random_tensor({3, 4, 5}, 1)});
  EXPECT_EQ(count_nodes(c.exe->graph(), NodeType::fused_reduction), 0);
}

}  // namespace
}  // namespace kiln::graph::fuse_reductions_test
