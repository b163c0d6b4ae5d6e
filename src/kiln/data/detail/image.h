#pragma once
// Shared helpers of the vision transforms (internal).
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/data/transform.h"

namespace kiln::data::vision::detail {

struct ImageDims {
  int64_t h, w, c;
  bool rank2;  // [H, W]: one channel, and outputs keep rank 2
};

inline ImageDims image_dims(const Tensor& t, const std::string& op) {
  if (!t.defined() || (t.rank() != 2 && t.rank() != 3) ||
      (t.dtype() != DType::u8 && t.dtype() != DType::f32)) {
    throw ShapeError(op + ": expected a u8 or f32 image of shape [H, W] or [H, W, C], got " +
                     describe(t));
  }
  return {t.dim(0), t.dim(1), t.rank() == 3 ? t.dim(2) : 1, t.rank() == 2};
}

// True when nothing else refers to t's data (no other handle, no view, no autograd): a transform
// may then overwrite it instead of allocating. Map hands each transform its row's only reference.
inline bool exclusive(const Tensor& t, const RowRng& rng) {
  return rng.inputs_owned && t.defined() && t.impl_ptr().use_count() == 1 && t.impl()->storage &&
         t.impl()->storage.use_count() == 1 && !t.impl()->autograd && t.is_contiguous();
}

inline Tensor new_image(const ImageDims& d, int64_t h, int64_t w, DType dtype) {
  return d.rank2 ? Tensor::empty(Shape{h, w}, dtype) : Tensor::empty(Shape{h, w, d.c}, dtype);
}

// Calls f(T{}) with T = uint8_t or float.
template <class F>
auto dispatch_pixel(DType dtype, F&& f) {
  if (dtype == DType::u8) return f(uint8_t{});
  return f(float{});
}

template <class T>
inline T saturate(float v) {
  if constexpr (std::is_same_v<T, uint8_t>) {
    v = v < 0.f ? 0.f : (v > 255.f ? 255.f : v);
    return uint8_t(v + 0.5f);
  } else {
    return v;
  }
}

template <class T>
inline T fill_as(double v) {
  if constexpr (std::is_same_v<T, uint8_t>) {
    return v <= 0 ? 0 : v >= 255 ? 255 : uint8_t(v + 0.5);
  } else {
    return float(v);
  }
}

// Resizes the window [y0, y0 + wh) x [x0, x0 + ww) of `src` (row stride `stride` elements, `c`
// channels) into `dst` [oh, ow, c]. Bilinear uses half-pixel centers (OpenCV's INTER_LINEAR).
void resize_window(const Tensor& src, int64_t y0, int64_t x0, int64_t wh, int64_t ww, Tensor& dst,
                   int64_t oh, int64_t ow, bool bilinear);

}  // namespace kiln::data::vision::detail
