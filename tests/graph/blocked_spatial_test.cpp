// The kernels of graph/kernels/blocked_spatial.cpp against the channels-last engines they stand
// in for: the elementwise ones must agree bit for bit (every element goes through the same f32
// tile functions, only its address differs); the spatial mean within float rounding (it sums
// the same H*W values per channel, in another order: 16 channels per vector instead of C).
#include <cfloat>
#include <cmath>
#include <cstring>

#include "graph_test_util.h"
#include "kiln/graph/detail/fused_elementwise.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/ops/kernels/pointwise.h"

namespace kiln::graph::blocked_spatial_test {
namespace {
using namespace testing;

Tensor empty_channels_last(const Shape& shape) {
  return Tensor::empty_strided(shape, channels_last_strides(shape), DType::f32);
}

// Where element (n, c, h, w) of a blocked [N, C, H, W] lives.
int64_t blocked_index(const Shape& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return ((n * (s[1] / 16) + c / 16) * s[2] * s[3] + h * s[3] + w) * 16 + c % 16;
}

// x's values in the blocked layout, in a tensor that (as in a compiled step) keeps x's
// channels-last meta.
Tensor to_blocked(const Tensor& x) {
  const Shape& s = x.shape();
  Tensor out = empty_channels_last(s);
  const Tensor xc = x.contiguous();
  const float* p = xc.data<float>();
  float* o = out.data<float>();
  int64_t i = 0;
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t w = 0; w < s[3]; ++w) o[blocked_index(s, n, c, h, w)] = p[i++];
  return out;
}

// The blocked tensor's values at (n, c, h, w), as an ordinary contiguous tensor.
Tensor from_blocked(const Tensor& b) {
  const Shape& s = b.shape();
  Tensor out = Tensor::empty(s, DType::f32);
  const float* p = b.data<float>();
  float* o = out.data<float>();
  int64_t i = 0;
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t w = 0; w < s[3]; ++w) o[i++] = p[blocked_index(s, n, c, h, w)];
  return out;
}

void expect_bitwise_equal(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  Tensor g = got.contiguous(), w = want.contiguous();
  const float *a = g.data<float>(), *b = w.data<float>();
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << "first at flat index " << first << ": " << a[first] << " vs "
                           << b[first];
}

// 48 channels (three blocks), 9x9 (a row of 81 * 16 values spans two tiles), 12 samples
// (enough for the kernels to split the work between threads).
const Shape kShape{12, 48, 9, 9};

// The pooling gradient of ResNet's head: broadcast_to([N, C, 1, 1]) * (1/HW), masked by the
// relu output y: fused[broadcast_to, mul_scalar, relu_grad](g, y).
TEST(BlockedSpatial, PooledGradientMatchesChannelsLastBitForBit) {
  Tensor g = random_tensor({kShape[0], kShape[1], 1, 1}, 1);
  Tensor y = channels_last(ops::relu(random_tensor(kShape, 2)));
  Node node;
  node.type = NodeType::fused_elementwise;
  ops::Attrs to_shape = ops::ShapeAttrs{.shape = {kShape[0], kShape[1], kShape[2], kShape[3]}};
  ops::Attrs scale = ops::ScalarAttrs{.scalar = 1.0 / 81.0};
  node.chain = {{ops::OpKind::broadcast_to, to_shape, {0}},
                {ops::OpKind::mul_scalar, scale, {-1}},
                {ops::OpKind::relu_grad, {}, {-2, 1}}};
  node.nchw16c = 0b10u | 1u << ops::kNchw16cOutputBit;

  Tensor want = empty_channels_last(kShape);
  FusedElementwise(node.chain).run(std::vector<Tensor>{g, y}, want);

  std::vector<Tensor> in{g, to_blocked(y)}, out{empty_channels_last(kShape)};
  ASSERT_TRUE(runs_blocked_spatial(node, in, out));
  make_blocked_spatial_kernel(node, in, out)->run(in, out);
  expect_bitwise_equal(from_blocked(out[0]), want);
}

// A plain op with a per-channel operand ([1, C, 1, 1], strided), one per sample ([N, 1, 1, 1])
// and a scalar, written over its full-size input (the memory plan's in-place reuse).
TEST(BlockedSpatial, BroadcastOperandsOfEveryKindMatchChannelsLastBitForBit) {
  Tensor x = channels_last(random_tensor(kShape, 3));
  Tensor wide = random_tensor({1, kShape[1], 1, 2}, 4);
  Tensor per_channel = wide.view_as(Shape{1, kShape[1], 1, 1}, Strides{2 * kShape[1], 2, 2, 1}, 1);
  ASSERT_EQ(per_channel.strides()[1], 2);
  Tensor per_sample = random_tensor({kShape[0], 1, 1, 1}, 5), scalar = Tensor::scalar(0.75f);
  Tensor want = empty_channels_last(kShape);
  Tensor t = empty_channels_last(kShape);
  std::vector<Tensor> tmp{t};
  ops::pointwise_kernel(ops::OpKind::mul, std::vector<Tensor>{x, per_channel}, tmp, {});
  std::vector<Tensor> w{want};
  ops::pointwise_kernel(ops::OpKind::add, std::vector<Tensor>{t, per_sample}, w, {});
  std::vector<Tensor> w2{want};
  ops::pointwise_kernel(ops::OpKind::mul, std::vector<Tensor>{want, scalar}, w2, {});

  Tensor buffer = to_blocked(x);
  auto run = [&](ops::OpKind op, const Tensor& operand) {
    Node node;
    node.op = op;
    node.nchw16c = 0b1u | 1u << ops::kNchw16cOutputBit;
    std::vector<Tensor> in{buffer, operand}, out{buffer};
    ASSERT_TRUE(runs_blocked_spatial(node, in, out));
    make_blocked_spatial_kernel(node, in, out)->run(in, out);
  };
  run(ops::OpKind::mul, per_channel);
  run(ops::OpKind::add, per_sample);
  run(ops::OpKind::mul, scalar);
  expect_bitwise_equal(from_blocked(buffer), want);
}

// Same-shape elementwise nodes need no special kernel (position i is position i).
TEST(BlockedSpatial, SameShapeElementwiseRunsOnThePlainEngine) {
  Node node;
  node.op = ops::OpKind::add;
  node.nchw16c = 0b11u | 1u << ops::kNchw16cOutputBit;
  std::vector<Tensor> in{empty_channels_last(kShape), empty_channels_last(kShape)},
      out{empty_channels_last(kShape)};
  EXPECT_FALSE(runs_blocked_spatial(node, in, out));
}

// mean / sum over H, W of a blocked input, into [N, C] and (keepdims) [N, C, 1, 1]; 20x20 has
// more runs per channel than the kernel sums before folding a partial in.
TEST(BlockedSpatial, SpatialMeanAndSumMatchChannelsLastWithinRounding) {
  for (const Shape& shape : {kShape, Shape{2, 32, 20, 20}}) {
    const int64_t N = shape[0], C = shape[1], HW = shape[2] * shape[3];
    Tensor x = channels_last(random_tensor(shape, 6));
    Tensor blocked = to_blocked(x);
    const Tensor xc = x.contiguous();
    for (ops::OpKind op : {ops::OpKind::mean, ops::OpKind::sum}) {
      for (bool keepdims : {false, true}) {
        const bool mean = op == ops::OpKind::mean;
        Tensor want = mean ? ops::mean(x, {2, 3}, keepdims) : ops::sum(x, {-1, -2}, keepdims);
        Node node;
        node.op = op;
        node.attrs = ops::ReduceAttrs{
            .axes = mean ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{-1, -2},
            .keepdims = keepdims};
        node.nchw16c = 1;
        std::vector<Tensor> in{blocked}, out{Tensor::empty(want.shape(), DType::f32)};
        ASSERT_TRUE(runs_blocked_spatial(node, in, out));
        make_blocked_spatial_kernel(node, in, out)->run(in, out);
        // Both sum the same HW terms in f32, in different orders: each is within the classic
        // bound HW * eps * sum|x| of the exact sum (of the exact mean: that over HW, plus the
        // scaling's half ulp), so they are within twice it of each other.
        const Tensor g = out[0].contiguous(), w = want.contiguous();
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t c = 0; c < C; ++c) {
            double exact = 0, magnitude = 0;
            for (int64_t k = 0; k < HW; ++k) {
              exact += xc.data<float>()[(n * C + c) * HW + k];
              magnitude += std::abs(xc.data<float>()[(n * C + c) * HW + k]);
            }
            const double scale = mean ? 1.0 / double(HW) : 1.0;
            const double bound = (double(HW) * FLT_EPSILON * magnitude + 1e-30) * scale +
                                 FLT_EPSILON * std::abs(exact * scale);
            const float got = g.data<float>()[n * C + c], ref = w.data<float>()[n * C + c];
            ASSERT_NEAR(got, exact * scale, bound)
                << ops::op_def(op).name << " at " << n << ", " << c << " of " << shape.str();
            ASSERT_NEAR(got, ref, 2 * bound);
          }
        }
      }
    }
  }
}

// A full-size input the node was not told is blocked is a pass bug: refused at bind time.
TEST(BlockedSpatial, RefusesAFullSizeInputNotMarkedBlocked) {
  Node node;
  node.op = ops::OpKind::mul;
  node.nchw16c = 1u << ops::kNchw16cOutputBit;
  std::vector<Tensor> in{empty_channels_last(kShape), Tensor::scalar(2.0f)},
      out{empty_channels_last(kShape)};
  ASSERT_TRUE(runs_blocked_spatial(node, in, out));
  EXPECT_THROW(make_blocked_spatial_kernel(node, in, out), Error);
}

}  // namespace
}  // namespace kiln::graph::blocked_spatial_test
