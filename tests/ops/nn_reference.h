#pragma once
// Plain double-precision references for the nn op tests (naive loops, row-major NCHW values).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "testing/op_check.h"

namespace kiln::testing {

struct ConvRef {
  int64_t n, c, h, w, o, kh, kw;
  std::array<int64_t, 2> stride{1, 1}, pad{0, 0}, dil{1, 1};
  int64_t groups = 1;
  int64_t oh() const { return (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) / stride[0] + 1; }
  int64_t ow() const { return (w + 2 * pad[1] - dil[1] * (kw - 1) - 1) / stride[1] + 1; }
  Shape x_shape() const { return {n, c, h, w}; }
  Shape w_shape() const { return {o, c / groups, kh, kw}; }
  Shape y_shape() const { return {n, o, oh(), ow()}; }
  ops::Conv2dOptions options() const {
    return {.stride = stride, .padding = pad, .dilation = dil, .groups = groups};
  }

  // Calls f(x_index, w_index, y_index) for every multiply-add of the convolution.
  template <class F>
  void for_each_tap(F f) const {
    int64_t cg = c / groups, og = o / groups;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t oc = 0; oc < o; ++oc) {
        int64_t g = oc / og;
        for (int64_t y = 0; y < oh(); ++y)
          for (int64_t x = 0; x < ow(); ++x)
            for (int64_t ic = 0; ic < cg; ++ic)
              for (int64_t i = 0; i < kh; ++i)
                for (int64_t j = 0; j < kw; ++j) {
                  int64_t iy = y * stride[0] - pad[0] + i * dil[0];
                  int64_t ix = x * stride[1] - pad[1] + j * dil[1];
                  if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                  int64_t xi = ((b * c + g * cg + ic) * h + iy) * w + ix;
                  int64_t wi = ((oc * cg + ic) * kh + i) * kw + j;
                  int64_t yi = ((b * o + oc) * oh() + y) * ow() + x;
                  f(xi, wi, yi);
                }
      }
  }

  Values forward(const Values& xv, const Values& wv, const Values* bias) const {
    Values y(static_cast<size_t>(y_shape().numel()), 0.0);
    for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) {
      y[size_t(yi)] += xv[size_t(xi)] * wv[size_t(wi)];
    });
    if (bias) {
      int64_t plane = oh() * ow();
      for (size_t i = 0; i < y.size(); ++i) y[i] += (*bias)[size_t(int64_t(i) / plane % o)];
    }
    return y;
  }
  // dx = Jᵀ g.
  Values backward_data(const Values& g, const Values& wv) const {
    Values dx(static_cast<size_t>(x_shape().numel()), 0.0);
    for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) {
      dx[size_t(xi)] += g[size_t(yi)] * wv[size_t(wi)];
    });
    return dx;
  }
  Values backward_weights(const Values& g, const Values& xv) const {
    Values dw(static_cast<size_t>(w_shape().numel()), 0.0);
    for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) {
      dw[size_t(wi)] += g[size_t(yi)] * xv[size_t(xi)];
    });
    return dw;
  }
};

// A channels-last copy of a row-major tensor.
inline Tensor channels_last_copy(const Tensor& t) {
  Tensor out = Tensor::empty_strided(t.shape(), channels_last_strides(t.shape()), t.dtype());
  out.copy_from(t);
  return out;
}

// Runs `fn`, expecting a ShapeError/Error whose message contains every string in `parts`.
template <class Fn>
void expect_error_mentions(Fn fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' missing from: " << msg;
    }
  }
}

inline Tensor to_bf16(const Tensor& t) {
  return ops::cast(t, DType::bf16);
}

}  // namespace kiln::testing
