// Per-pixel vision transforms: Decode, Rescale, Normalize, HWC2CHW.
#include <cstring>

#include "kiln/data/detail/image.h"
#include "kiln/data/vision.h"

namespace kiln::data::vision {

Tensor Decode::apply_one(const Tensor& input, RowRng&) const {
  if (!input.defined() || input.dtype() != DType::u8 || input.rank() != 1) {
    throw ShapeError("Decode: expected encoded bytes u8[n], got " + describe(input) +
                     " (already decoded?)");
  }
  Tensor in = input.contiguous();
  return decode_image(in.data<uint8_t>(), size_t(in.numel()), mode_);
}

Tensor Rescale::apply_one(const Tensor& input, RowRng& rng) const {
  if (!input.defined()) throw ShapeError("Rescale: undefined input");
  // A float row nobody else holds is rescaled in place.
  const bool in_place = input.dtype() == DType::f32 && detail::exclusive(input, rng);
  Tensor in = input.contiguous();
  Tensor out = in_place ? input : Tensor::empty(in.shape(), DType::f32);
  float* o = out.data<float>();
  const int64_t n = in.numel();
  const float s = rescale_, b = shift_;
  if (in.dtype() == DType::u8) {
    const uint8_t* p = in.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) o[i] = float(p[i]) * s + b;
  } else {
    if (in.dtype() != DType::f32) {
      Tensor f = Tensor::empty(in.shape(), DType::f32);
      f.copy_from(in);
      in = f;
    }
    const float* p = in.data<float>();
    for (int64_t i = 0; i < n; ++i) o[i] = p[i] * s + b;
  }
  return out;
}

Normalize::Normalize(std::vector<float> mean, std::vector<float> std, bool is_hwc)
    : mean_(std::move(mean)), is_hwc_(is_hwc) {
  if (mean_.empty() || mean_.size() != std.size()) {
    throw Error(kiln::detail::concat("Normalize: mean has ", mean_.size(), " values but std has ",
                                     std.size(), " (need the same, at least one)"));
  }
  for (float s : std) {
    if (!(s > 0)) throw Error("Normalize: std values must be positive");
    inv_std_.push_back(1.0f / s);
  }
}

Tensor Normalize::apply_one(const Tensor& input, RowRng& rng) const {
  if (!input.defined() || (input.rank() != 2 && input.rank() != 3) ||
      (input.dtype() != DType::u8 && input.dtype() != DType::f32)) {
    throw ShapeError("Normalize: expected a u8 or f32 image [H, W], [H, W, C] or [C, H, W], got " +
                     describe(input));
  }
  const bool in_place = input.dtype() == DType::f32 && detail::exclusive(input, rng);
  Tensor in = input.contiguous();
  const int64_t c = input.rank() == 2 ? 1 : (is_hwc_ ? in.dim(2) : in.dim(0));
  if (mean_.size() != 1 && int64_t(mean_.size()) != c) {
    throw ShapeError(kiln::detail::concat("Normalize: ", mean_.size(),
                                          " mean/std values for an image with ", c, " channels (",
                                          describe(input), ")"));
  }
  Tensor out = in_place ? input : Tensor::empty(in.shape(), DType::f32);
  float* o = out.data<float>();
  const int64_t n = in.numel(), plane = n / c;
  // Per channel: out = in * inv_std - mean * inv_std.
  std::vector<float> scale(static_cast<size_t>(c)), bias(static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k) {
    size_t j = mean_.size() == 1 ? 0 : size_t(k);
    scale[size_t(k)] = inv_std_[j];
    bias[size_t(k)] = -mean_[j] * inv_std_[j];
  }
  detail::dispatch_pixel(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = in.data<T>();
    if (c == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = float(p[i]) * scale[0] + bias[0];
    } else if (is_hwc_) {
      for (int64_t i = 0; i < plane; ++i) {
        for (int64_t k = 0; k < c; ++k)
          o[i * c + k] = float(p[i * c + k]) * scale[size_t(k)] + bias[size_t(k)];
      }
    } else {
      for (int64_t k = 0; k < c; ++k) {
        for (int64_t i = 0; i < plane; ++i)
          o[k * plane + i] = float(p[k * plane + i]) * scale[size_t(k)] + bias[size_t(k)];
      }
    }
  });
  return out;
}

Tensor HWC2CHW::apply_one(const Tensor& input, RowRng& rng) const {
  if (!input.defined() || (input.rank() != 2 && input.rank() != 3)) {
    throw ShapeError("HWC2CHW: expected an image [H, W] or [H, W, C], got " + describe(input));
  }
  const int64_t h = input.dim(0), w = input.dim(1), c = input.rank() == 3 ? input.dim(2) : 1;
  Shape chw{c, h, w};
  // One channel: the same bytes, viewed as [1, H, W].
  if (c == 1 && input.is_contiguous()) {
    if (detail::exclusive(input, rng)) {  // relabel the dims; no new tensor
      input.impl()->shape = chw;
      input.impl()->strides = contiguous_strides(chw);
      return input;
    }
    return input.view_as(chw, contiguous_strides(chw), input.offset());
  }
  Tensor in = input.contiguous();
  Tensor out = Tensor::empty(chw, in.dtype());
  const size_t es = dtype_size(in.dtype());
  auto* src = static_cast<const unsigned char*>(in.raw_data());
  auto* dst = static_cast<unsigned char*>(out.raw_data());
  const int64_t plane = h * w;
  auto transpose = [&](auto tag) {
    using T = decltype(tag);
    const T* s = reinterpret_cast<const T*>(src);
    T* d = reinterpret_cast<T*>(dst);
    for (int64_t i = 0; i < plane; ++i) {
      for (int64_t k = 0; k < c; ++k) d[k * plane + i] = s[i * c + k];
    }
  };
  switch (es) {
    case 1:
      transpose(uint8_t{});
      break;
    case 2:
      transpose(uint16_t{});
      break;
    case 4:
      transpose(uint32_t{});
      break;
    default:
      transpose(uint64_t{});
      break;
  }
  return out;
}

}  // namespace kiln::data::vision
