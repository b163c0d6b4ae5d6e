#include "kiln/autograd/tape.h"

#include <gtest/gtest.h>

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"
#include "testing/leaf_tensor.h"

namespace kiln::tape_test {
namespace {

using testing::leaf;

TEST(Tape, ReusedValueAccumulatesBothPaths) {
  autograd::install_tape();
  // y = x*x + x  ->  dy/dx = 2x + 1
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = ops::sum(ops::add(ops::mul(x, x), x));
  std::vector<Tensor> g = autograd::grad(y, {x});
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{3, 5, 7}));
}

TEST(Tape, DiamondGraphVisitsSharedNodeOnce) {
  autograd::install_tape();
  // a = x*2; y = a*a + a*3 -> dy/dx = (2a + 3) * 2
  Tensor x = leaf({1, -1}, {2});
  Tensor a = ops::mul_scalar(x, 2.0);
  Tensor y = ops::sum(ops::add(ops::mul(a, a), ops::mul_scalar(a, 3.0)));
  std::vector<Tensor> g = autograd::grad(y, {x});
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{14, -2}));
}

TEST(Tape, BackwardAccumulatesIntoGradAcrossCalls) {
  autograd::install_tape();
  Tensor x = leaf({2}, {1});
  autograd::backward(ops::sum(ops::mul(x, x)));
  EXPECT_FLOAT_EQ(x.grad().item<float>(), 4.0f);
  autograd::backward(ops::sum(ops::mul(x, x)));
  EXPECT_FLOAT_EQ(x.grad().item<float>(), 8.0f);
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Tape, NoGradScopeRecordsNothing) {
  autograd::install_tape();
  Tensor x = leaf({1, 2}, {2});
  Tensor y;
  {
    NoGradGuard guard;
    y = ops::mul(x, x);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(autograd::backward(ops::sum(y)), Error);
}

TEST(Tape, UnusedInputGetsZeroGradient) {
  autograd::install_tape();
  Tensor x = leaf({1, 2}, {2});
  Tensor unused = leaf({5}, {1});
  std::vector<Tensor> g = autograd::grad(ops::sum(x), {x, unused});
  EXPECT_EQ(g[1].to_vector<float>(), (std::vector<float>{0}));
}

TEST(Tape, NonScalarRootNeedsGradOutput) {
  autograd::install_tape();
  Tensor x = leaf({1, 2}, {2});
  Tensor y = ops::mul_scalar(x, 3.0);
  EXPECT_THROW(autograd::backward(y), Error);
  std::vector<Tensor> g = autograd::grad(y, {x}, Tensor::from_vector<float>({1, 10}, {2}));
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{3, 30}));
}

TEST(Tape, GradientsFlowThroughViews) {
  autograd::install_tape();
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = ops::transpose(x, 0, 1);   // [3, 2] view
  Tensor s = ops::slice(t, 0, 1, 3);    // rows 1..2 of the transpose
  Tensor y = ops::sum(ops::mul(s, s));  // x[:, 1:3] squared
  std::vector<Tensor> g = autograd::grad(y, {x});
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{0, 4, 6, 0, 10, 12}));
}

TEST(Tape, SavedTensorsAreFreedAfterBackward) {
  autograd::install_tape();
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = ops::mul(x, x);
  Tensor loss = ops::sum(y);
  autograd::backward(loss);
  // Without retain_graph a second backward through the same graph has lost its saved inputs.
  EXPECT_THROW(autograd::backward(loss), Error);
}

}  // namespace
}  // namespace kiln::tape_test
