// BlockedCopy against oneDNN's own reorder primitive: the same bytes in every blocked layout a
// convolution picks for its weights, padding included, and the way back.
#include "kiln/ops/dnnl/blocked_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/ops/dnnl/context.h"
#include "kiln/ops/functional.h"
#include "testing/dnnl_verbose.h"

namespace kiln::ops::dnnl_util::dnnl_blocked_copy_test {
namespace {

using md = dnnl::memory::desc;

// Distinct bit patterns per element, so any misplaced element shows. Every byte is 0x40-0x7f,
// so every f32 or bf16 element is a normal number (exponent neither 0 nor all ones): where
// oneDNN has no JIT reorder for a layout (bf16 ABcd8b16a2b without AVX-512) its reference
// reorder converts each bf16 through float and back, which flushes subnormals to zero, so a
// subnormal pattern would compare a value change, not a placement. BlockedCopy copies bits.
std::vector<uint8_t> numbered_bytes(size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = uint8_t(((i * 7 + i / 251 + 1) & 0x3f) | 0x40);
  return v;
}

std::vector<uint8_t> reorder_bytes(const md& from, const md& to, const std::vector<uint8_t>& src) {
  std::vector<uint8_t> dst(to.get_size(), 0xee);
  dnnl::memory a(from, engine(), const_cast<uint8_t*>(src.data()));
  dnnl::memory b(to, engine(), dst.data());
  dnnl::reorder(a, b).execute(stream(), a, b);
  stream().wait();
  return dst;
}

struct Layout {
  const char* name;
  dims shape;
  dt type;
  tag plain;
  tag blocked;
};

const Layout kLayouts[] = {
    // LeNet's second convolution: 16 outputs, the direct kernel's weights.
    {"Acdb16a", {16, 6, 5, 5}, dt::f32, tag::oihw, tag::Acdb16a},
    // 6 outputs padded to a block of 16.
    {"Acdb16a_padded", {6, 1, 5, 5}, dt::f32, tag::oihw, tag::Acdb16a},
    {"ABcd16b16a", {32, 32, 2, 2}, dt::f32, tag::oihw, tag::ABcd16b16a},
    {"ABcd16b16a_padded_both", {20, 7, 3, 3}, dt::f32, tag::oihw, tag::ABcd16b16a},
    {"aBcd16b", {3, 20, 2, 2}, dt::f32, tag::oihw, tag::aBcd16b},
    // Two inner blocks on one dimension (bf16 pairs of input channels).
    {"ABcd8b16a2b", {16, 32, 2, 2}, dt::bf16, tag::oihw, tag::ABcd8b16a2b},
    {"ABcd4b16a4b_padded", {24, 10, 3, 3}, dt::f32, tag::oihw, tag::ABcd4b16a4b},
    // Grouped weights.
    {"aBCde16c16b", {2, 16, 16, 2, 2}, dt::f32, tag::goihw, tag::aBCde16c16b},
    // A plain layout that is not row-major.
    {"from_hwio", {16, 6, 5, 5}, dt::f32, tag::hwio, tag::Acdb16a},
};

void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class BlockedCopyLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(BlockedCopyLayouts, WritesTheBytesOfOneDnnsReorderAndReadsThemBack) {
  const Layout& l = GetParam();
  const md plain(l.shape, l.type, l.plain), blocked(l.shape, l.type, l.blocked);
  const std::vector<uint8_t> src = numbered_bytes(plain.get_size());
  const std::vector<uint8_t> expected = reorder_bytes(plain, blocked, src);

  std::optional<BlockedCopy> copy = BlockedCopy::between(plain, blocked);
  ASSERT_TRUE(copy.has_value());
  std::vector<uint8_t> got(blocked.get_size(), 0xee);  // the padding must be written too
  copy->to_blocked(src.data(), got.data());
  EXPECT_EQ(got, expected);

  std::vector<uint8_t> back(plain.get_size(), 0xee);
  copy->to_plain(expected.data(), back.data());
  EXPECT_EQ(back, reorder_bytes(blocked, plain, expected));
  EXPECT_EQ(back, src);
}

INSTANTIATE_TEST_SUITE_P(Weights, BlockedCopyLayouts, ::testing::ValuesIn(kLayouts),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(BlockedCopy, LeavesWhatItCannotDescribeToAReorder) {
  const dims shape{16, 6, 5, 5};
  const md f32_plain(shape, dt::f32, tag::oihw);
  // A conversion between dtypes.
  EXPECT_FALSE(BlockedCopy::between(f32_plain, md(shape, dt::bf16, tag::Acdb16a)));
  // Other dims.
  EXPECT_FALSE(BlockedCopy::between(f32_plain, md({16, 6, 3, 3}, dt::f32, tag::Acdb16a)));
  // A source that is itself blocked.
  EXPECT_FALSE(
      BlockedCopy::between(md(shape, dt::f32, tag::Acdb16a), md(shape, dt::f32, tag::ABcd16b16a)));
  // Weights large enough that oneDNN's reorder is faster.
  const dims large{32, 16, 3, 3};
  EXPECT_FALSE(
      BlockedCopy::between(md(large, dt::f32, tag::oihw), md(large, dt::f32, tag::Acdb16a)));
  // One-byte elements.
  EXPECT_FALSE(BlockedCopy::between(md(shape, dt::s8, tag::oihw), md(shape, dt::s8, tag::Acdb16a)));
}

// The reason BlockedCopy exists: a convolution with small weights, forward and both backward
// ops, builds no reorder primitive (the first one leaves 0.7 MiB of libdnnl's code resident).
TEST(BlockedCopy, SmallConvWeightsNeedNoReorderPrimitive) {
  // LeNet's second convolution, at a batch no other test uses (so nothing comes from a cache).
  const Shape x_shape{3, 6, 13, 11}, w_shape{16, 6, 5, 5};
  Tensor x = Tensor::empty_strided(x_shape, channels_last_strides(x_shape), DType::f32);
  x.copy_from(Tensor::full(x_shape, 0.5));
  Tensor w = Tensor::full(w_shape, 0.25);
  const std::string log = kiln::testing::dnnl_verbose_output([&] {
    Tensor y = ops::conv2d(x, w, Tensor(), {});
    ops::conv2d_backward_data(y, w, x_shape, {});
    ops::conv2d_backward_weights(y, x, w_shape, false, {});
  });
  EXPECT_NE(log.find("convolution,"), std::string::npos) << log;  // the log is there
  EXPECT_EQ(log.find(",reorder,"), std::string::npos) << log;
}

}  // namespace
}  // namespace kiln::ops::dnnl_util::dnnl_blocked_copy_test
