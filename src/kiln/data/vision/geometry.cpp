// Geometric vision transforms: Resize, CenterCrop, RandomCrop, RandomResizedCrop, flips, rotation.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/data/detail/image.h"
#include "kiln/data/vision.h"

namespace kiln::data::vision {

using detail::dispatch_pixel;
using detail::image_dims;
using detail::ImageDims;
using detail::new_image;

namespace detail {

void resize_window(const Tensor& src, int64_t y0, int64_t x0, int64_t wh, int64_t ww, Tensor& dst,
                   int64_t oh, int64_t ow, bool bilinear) {
  const int64_t c = src.rank() == 3 ? src.dim(2) : 1;
  const int64_t stride = src.dim(1) * c;
  dispatch_pixel(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = src.data<T>() + y0 * stride + x0 * c;
    T* out = dst.data<T>();
    if (!bilinear) {
      std::vector<int64_t> xs(static_cast<size_t>(ow));
      for (int64_t x = 0; x < ow; ++x) {
        xs[size_t(x)] = std::min<int64_t>(int64_t(std::floor(double(x) * ww / ow)), ww - 1) * c;
      }
      for (int64_t y = 0; y < oh; ++y) {
        int64_t sy = std::min<int64_t>(int64_t(std::floor(double(y) * wh / oh)), wh - 1);
        const T* row = in + sy * stride;
        T* o = out + y * ow * c;
        for (int64_t x = 0; x < ow; ++x) {
          for (int64_t k = 0; k < c; ++k) o[x * c + k] = row[xs[size_t(x)] + k];
        }
      }
      return;
    }
    std::vector<int64_t> xa(static_cast<size_t>(ow)), xb(static_cast<size_t>(ow));
    std::vector<float> wx(static_cast<size_t>(ow));
    const double sxs = double(ww) / double(ow), sys = double(wh) / double(oh);
    for (int64_t x = 0; x < ow; ++x) {
      double sx = std::max(0.0, (double(x) + 0.5) * sxs - 0.5);
      int64_t a = std::min<int64_t>(int64_t(sx), ww - 1);
      xa[size_t(x)] = a * c;
      xb[size_t(x)] = std::min<int64_t>(a + 1, ww - 1) * c;
      wx[size_t(x)] = float(sx - double(a));
    }
    for (int64_t y = 0; y < oh; ++y) {
      double sy = std::max(0.0, (double(y) + 0.5) * sys - 0.5);
      int64_t a = std::min<int64_t>(int64_t(sy), wh - 1);
      int64_t b = std::min<int64_t>(a + 1, wh - 1);
      const float fy = float(sy - double(a));
      const T* r0 = in + a * stride;
      const T* r1 = in + b * stride;
      T* o = out + y * ow * c;
      for (int64_t x = 0; x < ow; ++x) {
        const float fx = wx[size_t(x)];
        const int64_t pa = xa[size_t(x)], pb = xb[size_t(x)];
        for (int64_t k = 0; k < c; ++k) {
          float top = float(r0[pa + k]) + (float(r0[pb + k]) - float(r0[pa + k])) * fx;
          float bot = float(r1[pa + k]) + (float(r1[pb + k]) - float(r1[pa + k])) * fx;
          o[x * c + k] = saturate<T>(top + (bot - top) * fy);
        }
      }
    }
  });
}

}  // namespace detail

namespace {

std::pair<int64_t, int64_t> size_hw(const std::vector<int64_t>& size, const char* op) {
  if (size.size() == 1 && size[0] > 0) return {size[0], size[0]};
  if (size.size() == 2 && size[0] > 0 && size[1] > 0) return {size[0], size[1]};
  throw Error(std::string(op) + ": size must be {s} or {h, w} with positive values");
}

// Copies the window starting at (top, left) of size oh x ow; pixels outside the image get `fill`.
Tensor crop_pad(const Tensor& in, const ImageDims& d, int64_t top, int64_t left, int64_t oh,
                int64_t ow, double fill) {
  Tensor out = new_image(d, oh, ow, in.dtype());
  dispatch_pixel(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T f = detail::fill_as<T>(fill);
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    const int64_t c = d.c;
    const int64_t x_lo = std::clamp<int64_t>(-left, 0, ow);          // first column inside
    const int64_t x_hi = std::clamp<int64_t>(d.w - left, x_lo, ow);  // one past the last
    for (int64_t y = 0; y < oh; ++y) {
      T* o = dst + y * ow * c;
      const int64_t sy = top + y;
      if (sy < 0 || sy >= d.h) {
        std::fill(o, o + ow * c, f);
        continue;
      }
      std::fill(o, o + x_lo * c, f);
      std::memcpy(o + x_lo * c, src + (sy * d.w + left + x_lo) * c,
                  size_t((x_hi - x_lo) * c) * sizeof(T));
      std::fill(o + x_hi * c, o + ow * c, f);
    }
  });
  return out;
}

}  // namespace

Resize::Resize(std::vector<int64_t> size, Inter interpolation)
    : size_(std::move(size)), inter_(interpolation) {
  size_hw(size_, "Resize");
}

Tensor Resize::apply_one(const Tensor& input, RowRng&) const {
  Tensor in = input.contiguous();
  ImageDims d = image_dims(in, "Resize");
  int64_t oh, ow;
  if (size_.size() == 1) {
    // The shorter edge becomes size, keeping the aspect ratio.
    if (d.h <= d.w) {
      oh = size_[0];
      ow = std::max<int64_t>(1, int64_t(double(size_[0]) * double(d.w) / double(d.h)));
    } else {
      ow = size_[0];
      oh = std::max<int64_t>(1, int64_t(double(size_[0]) * double(d.h) / double(d.w)));
    }
  } else {
    oh = size_[0];
    ow = size_[1];
  }
  Tensor out = new_image(d, oh, ow, in.dtype());
  detail::resize_window(in, 0, 0, d.h, d.w, out, oh, ow, inter_ == Inter::bilinear);
  return out;
}

CenterCrop::CenterCrop(std::vector<int64_t> size) {
  std::tie(h_, w_) = size_hw(size, "CenterCrop");
}

Tensor CenterCrop::apply_one(const Tensor& input, RowRng&) const {
  Tensor in = input.contiguous();
  ImageDims d = image_dims(in, "CenterCrop");
  int64_t top = int64_t(std::lround(double(d.h - h_) / 2.0));
  int64_t left = int64_t(std::lround(double(d.w - w_) / 2.0));
  return crop_pad(in, d, top, left, h_, w_, 0);
}

RandomCrop::RandomCrop(std::vector<int64_t> size, std::vector<int64_t> padding, bool pad_if_needed,
                       double fill_value)
    : pad_if_needed_(pad_if_needed), fill_(fill_value) {
  std::tie(h_, w_) = size_hw(size, "RandomCrop");
  for (int64_t p : padding) {
    if (p < 0) throw Error("RandomCrop: padding must be >= 0");
  }
  switch (padding.size()) {
    case 0:
      break;
    case 1:
      left_ = top_ = right_ = bottom_ = padding[0];
      break;
    case 2:
      left_ = right_ = padding[0];
      top_ = bottom_ = padding[1];
      break;
    case 4:
      left_ = padding[0];
      top_ = padding[1];
      right_ = padding[2];
      bottom_ = padding[3];
      break;
    default:
      throw Error("RandomCrop: padding must have 0, 1, 2 or 4 values");
  }
}

Tensor RandomCrop::apply_one(const Tensor& input, RowRng& rng) const {
  Tensor in = input.contiguous();
  ImageDims d = image_dims(in, "RandomCrop");
  int64_t left = left_, top = top_;
  int64_t ph = d.h + top_ + bottom_, pw = d.w + left_ + right_;
  if (pad_if_needed_) {
    if (ph < h_) {
      top += h_ - ph;
      ph = h_;
    }
    if (pw < w_) {
      left += w_ - pw;
      pw = w_;
    }
  }
  if (ph < h_ || pw < w_) {
    throw ShapeError(kiln::detail::concat("RandomCrop: crop ", h_, "x", w_,
                                          " is larger than the padded image ", ph, "x", pw, " (",
                                          describe(input), "); set pad_if_needed"));
  }
  int64_t y = rng.randint(0, ph - h_), x = rng.randint(0, pw - w_);
  return crop_pad(in, d, y - top, x - left, h_, w_, fill_);
}

RandomResizedCrop::RandomResizedCrop(std::vector<int64_t> size, std::pair<double, double> scale,
                                     std::pair<double, double> ratio, Inter interpolation,
                                     int max_attempts)
    : scale_(scale), ratio_(ratio), inter_(interpolation), max_attempts_(max_attempts) {
  std::tie(h_, w_) = size_hw(size, "RandomResizedCrop");
  if (!(scale.first > 0 && scale.first <= scale.second)) {
    throw Error("RandomResizedCrop: scale must satisfy 0 < min <= max");
  }
  if (!(ratio.first > 0 && ratio.first <= ratio.second)) {
    throw Error("RandomResizedCrop: ratio must satisfy 0 < min <= max");
  }
  if (max_attempts < 1) throw Error("RandomResizedCrop: max_attempts must be positive");
}

Tensor RandomResizedCrop::apply_one(const Tensor& input, RowRng& rng) const {
  Tensor in = input.contiguous();
  ImageDims d = image_dims(in, "RandomResizedCrop");
  const double area = double(d.h * d.w);
  int64_t ch = d.h, cw = d.w, y = 0, x = 0;
  bool found = false;
  for (int i = 0; i < max_attempts_ && !found; ++i) {
    double target = area * rng.uniform(scale_.first, scale_.second);
    double aspect = std::exp(rng.uniform(std::log(ratio_.first), std::log(ratio_.second)));
    int64_t w = std::lround(std::sqrt(target * aspect));
    int64_t h = std::lround(std::sqrt(target / aspect));
    if (w > 0 && h > 0 && w <= d.w && h <= d.h) {
      y = rng.randint(0, d.h - h);
      x = rng.randint(0, d.w - w);
      ch = h;
      cw = w;
      found = true;
    }
  }
  if (!found) {  // central crop at the nearest allowed aspect ratio
    double in_ratio = double(d.w) / double(d.h);
    if (in_ratio < ratio_.first) {
      cw = d.w;
      ch = std::max<int64_t>(1, std::lround(double(cw) / ratio_.first));
    } else if (in_ratio > ratio_.second) {
      ch = d.h;
      cw = std::max<int64_t>(1, std::lround(double(ch) * ratio_.second));
    } else {
      ch = d.h;
      cw = d.w;
    }
    ch = std::min(ch, d.h);
    cw = std::min(cw, d.w);
    y = (d.h - ch) / 2;
    x = (d.w - cw) / 2;
  }
  Tensor out = new_image(d, h_, w_, in.dtype());
  detail::resize_window(in, y, x, ch, cw, out, h_, w_, inter_ == Inter::bilinear);
  return out;
}

namespace {
void check_prob(double p, const char* op) {
  if (!(p >= 0 && p <= 1)) throw Error(std::string(op) + ": prob must be in [0, 1]");
}
}  // namespace

RandomHorizontalFlip::RandomHorizontalFlip(double prob) : prob_(prob) {
  check_prob(prob, "RandomHorizontalFlip");
}

Tensor RandomHorizontalFlip::apply_one(const Tensor& input, RowRng& rng) const {
  ImageDims d = image_dims(input, "RandomHorizontalFlip");
  if (!rng.bernoulli(prob_)) return input;
  if (detail::exclusive(input, rng) && d.w * d.c <= 4096) {  // reverse each row in place
    dispatch_pixel(input.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = input.data<T>();
      T tmp[4096];
      const int64_t c = d.c, w = d.w;
      for (int64_t y = 0; y < d.h; ++y) {
        T* r = p + y * w * c;
        if (c == 1) {
          for (int64_t x = 0; x < w; ++x) tmp[x] = r[w - 1 - x];  // vectorizes (permutes)
        } else {
          for (int64_t x = 0; x < w; ++x) {
            for (int64_t k = 0; k < c; ++k) tmp[x * c + k] = r[(w - 1 - x) * c + k];
          }
        }
        std::memcpy(r, tmp, size_t(w * c) * sizeof(T));
      }
    });
    return input;
  }
  Tensor in = input.contiguous();
  Tensor out = new_image(d, d.h, d.w, in.dtype());
  dispatch_pixel(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    const int64_t c = d.c, w = d.w;
    for (int64_t y = 0; y < d.h; ++y) {
      const T* s = src + y * w * c;
      T* o = dst + y * w * c;
      if (c == 1) {
        for (int64_t x = 0; x < w; ++x) o[x] = s[w - 1 - x];
      } else {
        for (int64_t x = 0; x < w; ++x) {
          for (int64_t k = 0; k < c; ++k) o[x * c + k] = s[(w - 1 - x) * c + k];
        }
      }
    }
  });
  return out;
}

RandomVerticalFlip::RandomVerticalFlip(double prob) : prob_(prob) {
  check_prob(prob, "RandomVerticalFlip");
}

Tensor RandomVerticalFlip::apply_one(const Tensor& input, RowRng& rng) const {
  ImageDims d = image_dims(input, "RandomVerticalFlip");
  if (!rng.bernoulli(prob_)) return input;
  Tensor in = input.contiguous();
  Tensor out = new_image(d, d.h, d.w, in.dtype());
  const size_t row = size_t(d.w * d.c) * dtype_size(in.dtype());
  auto* src = static_cast<const unsigned char*>(in.raw_data());
  auto* dst = static_cast<unsigned char*>(out.raw_data());
  for (int64_t y = 0; y < d.h; ++y)
    std::memcpy(dst + size_t(y) * row, src + size_t(d.h - 1 - y) * row, row);
  return out;
}

RandomRotation::RandomRotation(std::vector<double> degrees, Inter resample, bool expand,
                               double fill_value)
    : inter_(resample), expand_(expand), fill_(fill_value) {
  if (degrees.size() == 1) {
    if (degrees[0] < 0) throw Error("RandomRotation: a single degrees value must be >= 0");
    lo_ = -degrees[0];
    hi_ = degrees[0];
  } else if (degrees.size() == 2 && degrees[0] <= degrees[1]) {
    lo_ = degrees[0];
    hi_ = degrees[1];
  } else {
    throw Error("RandomRotation: degrees must be {d} or {min, max} with min <= max");
  }
}

Tensor RandomRotation::apply_one(const Tensor& input, RowRng& rng) const {
  Tensor in = input.contiguous();
  ImageDims d = image_dims(in, "RandomRotation");
  const double angle = lo_ == hi_ ? lo_ : rng.uniform(lo_, hi_);
  double cs = std::cos(angle * M_PI / 180.0), sn = std::sin(angle * M_PI / 180.0);
  // Multiples of 90 degrees: exact cos/sin, so the mapping is an exact pixel permutation.
  double quarter = angle / 90.0;
  if (std::abs(quarter - std::round(quarter)) < 1e-9) {
    int q = int(((long long)std::llround(quarter) % 4 + 4) % 4);
    const double c4[4] = {1, 0, -1, 0}, s4[4] = {0, 1, 0, -1};
    cs = c4[q];
    sn = s4[q];
  }
  int64_t oh = d.h, ow = d.w;
  if (expand_) {
    ow = int64_t(std::lround(std::abs(cs) * double(d.w) + std::abs(sn) * double(d.h)));
    oh = int64_t(std::lround(std::abs(sn) * double(d.w) + std::abs(cs) * double(d.h)));
  }
  Tensor out = new_image(d, oh, ow, in.dtype());
  const double cx = (double(d.w) - 1) / 2, cy = (double(d.h) - 1) / 2;
  const double ocx = (double(ow) - 1) / 2, ocy = (double(oh) - 1) / 2;
  dispatch_pixel(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    const T f = detail::fill_as<T>(fill_);
    const int64_t c = d.c;
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        // Inverse map: the source point that lands on (x, y) after a counter-clockwise rotation.
        const double dx = double(x) - ocx, dy = double(y) - ocy;
        const double sx = cx + dx * cs - dy * sn, sy = cy + dx * sn + dy * cs;
        T* o = dst + (y * ow + x) * c;
        if (inter_ == Inter::nearest) {
          const int64_t ix = int64_t(std::floor(sx + 0.5)), iy = int64_t(std::floor(sy + 0.5));
          if (ix < 0 || iy < 0 || ix >= d.w || iy >= d.h) {
            for (int64_t k = 0; k < c; ++k) o[k] = f;
          } else {
            for (int64_t k = 0; k < c; ++k) o[k] = src[(iy * d.w + ix) * c + k];
          }
          continue;
        }
        const int64_t x0 = int64_t(std::floor(sx)), y0 = int64_t(std::floor(sy));
        const float fx = float(sx - double(x0)), fy = float(sy - double(y0));
        auto at = [&](int64_t yy, int64_t xx, int64_t k) -> float {
          if (xx < 0 || yy < 0 || xx >= d.w || yy >= d.h) return float(fill_);
          return float(src[(yy * d.w + xx) * c + k]);
        };
        if (sx < -1 || sy < -1 || sx > double(d.w) || sy > double(d.h)) {
          for (int64_t k = 0; k < c; ++k) o[k] = f;
          continue;
        }
        for (int64_t k = 0; k < c; ++k) {
          float top = at(y0, x0, k) + (at(y0, x0 + 1, k) - at(y0, x0, k)) * fx;
          float bot = at(y0 + 1, x0, k) + (at(y0 + 1, x0 + 1, k) - at(y0 + 1, x0, k)) * fx;
          o[k] = detail::saturate<T>(top + (bot - top) * fy);
        }
      }
    }
  });
  return out;
}

}  // namespace kiln::data::vision
