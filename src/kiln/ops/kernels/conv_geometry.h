#pragma once
// Small shape and layout helpers shared by the hand-written convolution kernels
// (conv_single_channel, conv_col2im).
#include <array>
#include <cstdint>
#include <string_view>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln::ops::conv_geometry {

inline int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// Whether every dimension of extent > 1 of a rank-4 tensor has the expected stride.
inline bool strides_are(const Tensor& t, const std::array<int64_t, 4>& expected) {
  if (t.rank() != 4) return false;
  for (int d = 0; d < 4; ++d) {
    if (t.dim(d) > 1 && t.strides()[size_t(d)] != expected[size_t(d)]) return false;
  }
  return true;
}

// [N, C, H, W] stored as dense NHWC.
inline bool is_dense_channels_last(const Tensor& t) {
  const int64_t c = t.dim(1), h = t.dim(2), w = t.dim(3);
  return strides_are(t, {h * w * c, 1, w * c, c});
}

// The padding of a stride-1 convolution from its extents: out = in + 2*pad - k + 1.
inline int64_t implied_padding(std::string_view op, int64_t in, int64_t k, int64_t out,
                               const char* what) {
  const int64_t twice = out - in + k - 1;
  if (twice < 0 || twice % 2 != 0) {
    throw ShapeError(detail::concat(op, ": ", what, " extents in ", in, ", kernel ", k, ", out ",
                                    out, " match no stride-1 padding"));
  }
  return twice / 2;
}

}  // namespace kiln::ops::conv_geometry
