// Graph inputs read where the caller keeps them (CompileOptions::inputs_in_place): no buffer in
// the arena and no copy per step; the kernels follow each step's batch to its address.
#include "graph_test_util.h"
#include "kiln/graph/memory_plan.h"

namespace kiln::graph::inputs_in_place_test {
namespace {
using namespace testing;

struct Net {
  LossFn loss;
  std::vector<Tensor> params;
  Shape x_shape;
};

// graph_test_util.h's conv net. One input channel: the first layer runs Kiln's own kernels
// (conv_relu_pool forward, pooled_conv_grad backward), which read the batch through its tensor.
// Three: oneDNN's fused convolution, which keeps raw addresses.
Net conv_net(int64_t channels) {
  return {conv_net_loss, conv_net_params(channels), {4, channels, 20, 20}};
}

// The perceptron: oneDNN's fused matmul reads the batch, and the fused momentum-free SGD's
// weight gradient reads it again at the end of the step.
Net mlp() {
  return {mlp_loss, mlp_params(24, 32, 10, 11), {8, 24}};
}

// How a step's batch reaches the graph.
enum class Batch {
  fresh,       // a new dense tensor every step: a new address every step
  same,        // the same tensor every step
  strided,     // a transposed view: other strides than the graph's, staged
  misaligned,  // a dense view 4 bytes into a larger tensor, staged
};

Tensor make_batch(const Shape& shape, int step, Batch kind) {
  const uint64_t seed = kind == Batch::same ? 100 : 100 + uint64_t(step);
  if (kind == Batch::strided) {
    std::vector<int64_t> perm(size_t(shape.rank()));
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = int64_t(i);
    std::swap(perm[0], perm[1]);
    Shape swapped = shape;
    std::swap(swapped[0], swapped[1]);
    return ops::transpose(random_tensor(swapped, seed), perm);
  }
  if (kind == Batch::misaligned) {
    Tensor big = random_tensor(Shape{shape.numel() + 1}, seed);
    return big.view_as(shape, contiguous_strides(shape), 1);
  }
  return random_tensor(shape, seed);
}

struct Trained {
  std::vector<float> losses;
  std::vector<Tensor> params;
  int inputs_in_place = 0;
  bool inputs_have_buffers = false;
};

Trained train(Net net, Batch kind, bool in_place, int steps = 3) {
  Tensor labels = random_labels(net.x_shape[0], 10, 9);
  Tensor lr = Tensor::scalar(0.05);
  Tensor first = make_batch(net.x_shape, 0, kind);
  Executable exe(trace_step(net.loss, net.params, first, labels, lr),
                 {.fusion = true, .inputs_in_place = in_place});
  Trained t;
  for (int step = 0; step < steps; ++step) {
    Tensor x = step == 0 ? first : make_batch(net.x_shape, step, kind);
    const std::vector<float> before = x.to_vector<float>();
    t.losses.push_back(exe.run(std::vector<Tensor>{x, labels})[0].item<float>());
    EXPECT_EQ(x.to_vector<float>(), before) << "the step wrote into the caller's batch";
  }
  t.params = net.params;
  t.inputs_in_place = exe.report().inputs_in_place;
  for (ValueId v : exe.graph().inputs()) {
    t.inputs_have_buffers |= exe.plan().buffer_of[size_t(v)] != MemoryPlan::kNone;
  }
  return t;
}

struct NamedNet {
  const char* name;
  Net (*make)();
};
const NamedNet kNets[] = {
    {"ConvNetOneChannel", [] { return conv_net(1); }},
    {"ConvNetThreeChannels", [] { return conv_net(3); }},
    {"Perceptron", mlp},
};

class InputsInPlace : public ::testing::TestWithParam<NamedNet> {};

// In place or copied, the same kernels see the same numbers: the results agree bit for bit,
// whether the batch moves every step, stays, or has to be staged.
TEST_P(InputsInPlace, TrainsExactlyAsWithCopiedInputs) {
  for (Batch kind : {Batch::fresh, Batch::same, Batch::strided, Batch::misaligned}) {
    SCOPED_TRACE(int(kind));
    Trained copied = train(GetParam().make(), kind, false);
    Trained in_place = train(GetParam().make(), kind, true);
    EXPECT_EQ(copied.inputs_in_place, 0);
    EXPECT_TRUE(copied.inputs_have_buffers);
    EXPECT_EQ(in_place.inputs_in_place, 2) << "the batch and the labels";
    EXPECT_FALSE(in_place.inputs_have_buffers);
    EXPECT_EQ(in_place.losses, copied.losses);
    for (size_t i = 0; i < copied.params.size(); ++i) {
      EXPECT_EQ(in_place.params[i].to_vector<float>(), copied.params[i].to_vector<float>())
          << "parameter " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Nets, InputsInPlace, ::testing::ValuesIn(kNets),
                         [](const auto& info) { return std::string(info.param.name); });

// An input that no longer has a buffer cannot be written over: an elementwise op whose input
// dies at it writes its output elsewhere, and the caller's tensor keeps its values.
TEST(InputsInPlaceRules, NothingIsWrittenOverAnInput) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::exp(ops::neg(in[0]))};
  };
  Tensor x = random_tensor({16, 16}, 1);
  const std::vector<float> before = x.to_vector<float>();
  Compiled c = compile_and_run(fn, {x}, {});
  EXPECT_EQ(c.exe->report().inputs_in_place, 1);
  EXPECT_EQ(x.to_vector<float>(), before);
  expect_all_close(c.outputs, fn({x}), 1e-6, 1e-6, "exp(-x)");
}

// A batch that is graph state is staged: here the second layer's weight is also the batch. The
// step updates that weight before the first layer's weight gradient reads the batch, so a batch
// read in place would change under it.
TEST(InputsInPlaceRules, StateMemoryPassedAsInputIsStaged) {
  auto run = [](bool in_place) {
    std::vector<Tensor> params = mlp_params(16, 16, 16, 3);
    Tensor labels = random_labels(16, 16, 4), lr = Tensor::scalar(0.5);
    Executable exe(trace_step(mlp_loss, params, params[2], labels, lr),
                   {.fusion = true, .inputs_in_place = in_place});
    std::vector<float> result;
    for (int step = 0; step < 3; ++step) {
      result.push_back(exe.run(std::vector<Tensor>{params[2], labels})[0].item<float>());
    }
    for (const Tensor& p : params) {
      for (float v : p.to_vector<float>()) result.push_back(v);
    }
    return result;
  };
  EXPECT_EQ(run(true), run(false));
}

}  // namespace
}  // namespace kiln::graph::inputs_in_place_test
