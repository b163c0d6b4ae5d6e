// autograd::grad's gradient-ready callback, on which data parallelism starts its all-reduces.
#include <gtest/gtest.h>

#include "kiln/autograd/tape.h"
#include "kiln/ops/functional.h"
#include "testing/leaf_tensor.h"

namespace kiln::grad_ready_test {
namespace {

using testing::leaf;

TEST(GradReady, EachInputOnceWithItsFinalGradientInBackwardOrder) {
  autograd::install_tape();
  // w1 is used twice (its gradient has two parts); w2 is used last in the forward, so its
  // gradient is final first; w3 does not take part.
  Tensor x = leaf({1, 2}, {2});
  Tensor w1 = leaf({3, 4}, {2});
  Tensor w2 = leaf({5, 6}, {2});
  Tensor w3 = leaf({7, 8}, {2});
  Tensor h = ops::mul(ops::mul(x, w1), w1);  // x * w1²
  Tensor y = ops::sum(ops::mul(h, w2));
  std::vector<size_t> order;
  std::vector<std::vector<float>> seen(4);
  std::vector<Tensor> grads =
      autograd::grad(y, {x, w1, w2, w3}, Tensor(), false, [&](size_t i, const Tensor& g) {
        order.push_back(i);
        seen[i] = g.to_vector<float>();
      });
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order.front(), 2u) << "w2's gradient is complete before the others";
  EXPECT_EQ(order.back(), 3u) << "an input root does not depend on comes last";
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(seen[i], grads[i].to_vector<float>()) << i;
  // dy/dw1 = 2 x w1 w2: both uses of w1 were added before it was reported.
  EXPECT_EQ(seen[1], (std::vector<float>{2 * 1 * 3 * 5, 2 * 2 * 4 * 6}));
  EXPECT_EQ(seen[3], (std::vector<float>{0, 0}));
}

}  // namespace
}  // namespace kiln::grad_ready_test
