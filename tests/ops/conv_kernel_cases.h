#pragma once
// What the tests of the hand-written convolution kernels (conv_single_channel, conv_col2im)
// share: a named reference case, and whether the kernels run on this CPU; the relu and the bias
// gradient in double precision.
#include <algorithm>
#include <array>
#include <ostream>

#include "nn_reference.h"
#include "testing/cpu_features.h"

namespace kiln::testing {

// The kernels run only where Kiln's AVX-512 variants do (cpu_features.h); elsewhere can_run is
// false, the ops run oneDNN, and the kernel tests have nothing to check.

struct ConvKernelCase {
  const char* name;
  ConvRef g;
};

inline void PrintTo(const ConvKernelCase& c, std::ostream* os) {
  *os << c.name;
}

// ConvAttrs of a convolution window.
inline ops::ConvAttrs window(std::array<int64_t, 2> pad, std::array<int64_t, 2> stride = {1, 1},
                             std::array<int64_t, 2> dilation = {1, 1}) {
  ops::ConvAttrs a;
  a.padding = pad;
  a.stride = stride;
  a.dilation = dilation;
  return a;
}

// A stride-1 convolution of one input channel: n images of h x w, o output channels.
inline ConvRef single(int64_t n, int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw,
                      int64_t ph, int64_t pw) {
  return {.n = n, .c = 1, .h = h, .w = w, .o = o, .kh = kh, .kw = kw, .pad = {ph, pw}};
}

inline Tensor channels_last_empty(const Shape& s) {
  return Tensor::empty_strided(s, channels_last_strides(s), DType::f32);
}

inline Values relu_of(Values v) {
  for (double& x : v) x = std::max(x, 0.0);
  return v;
}

// The bias gradient: dy (row-major [N, O, OH, OW] values) summed over all but the channels.
inline Values bias_gradient(const ConvRef& g, const Values& dy) {
  Values db(size_t(g.o), 0.0);
  int64_t plane = g.oh() * g.ow();
  for (size_t i = 0; i < dy.size(); ++i) db[size_t(int64_t(i) / plane % g.o)] += dy[i];
  return db;
}

}  // namespace kiln::testing
