#pragma once
// Vision transforms (MindSpore's mindspore.dataset.vision) on images stored HWC ([H, W, C] or
// [H, W]) as u8 or f32. Each is a tight loop of its own (they run on pipeline threads, outside the
// kernel pool); random ones draw from the row's RowRng, so a seeded run is reproducible whatever
// the worker count.
#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/data/transform.h"
#include "kiln/data/transforms.h"

namespace kiln::data::vision {

enum class Inter { bilinear, nearest };

// Encoded bytes (u8 [n]) -> u8 [H, W, C]. JPEG or PNG, told apart by their magic bytes. `rgb`:
// always 3 channels (MindSpore's default); false keeps the file's channels (1 for grayscale).
class Decode : public TensorTransform {
 public:
  explicit Decode(bool rgb = true) : rgb_(rgb) {}
  std::string name() const override { return "Decode"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  bool rgb_;
};

// size {h, w}: that size; size {s}: the shorter edge becomes s, keeping the aspect ratio.
class Resize : public TensorTransform {
 public:
  explicit Resize(std::vector<int64_t> size, Inter interpolation = Inter::bilinear);
  std::string name() const override { return "Resize"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  std::vector<int64_t> size_;
  Inter inter_;
};

// Crops the center; pads with zeros where the crop is larger than the image.
class CenterCrop : public TensorTransform {
 public:
  explicit CenterCrop(std::vector<int64_t> size);
  std::string name() const override { return "CenterCrop"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  int64_t h_, w_;
};

// padding: {} none, {p} all sides, {left/right, top/bottom}, or {left, top, right, bottom}.
class RandomCrop : public TensorTransform {
 public:
  explicit RandomCrop(std::vector<int64_t> size, std::vector<int64_t> padding = {},
                      bool pad_if_needed = false, double fill_value = 0);
  std::string name() const override { return "RandomCrop"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  int64_t h_, w_;
  int64_t left_ = 0, top_ = 0, right_ = 0, bottom_ = 0;
  bool pad_if_needed_;
  double fill_;
};

class RandomResizedCrop : public TensorTransform {
 public:
  explicit RandomResizedCrop(std::vector<int64_t> size,
                             std::pair<double, double> scale = {0.08, 1.0},
                             std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0},
                             Inter interpolation = Inter::bilinear, int max_attempts = 10);
  std::string name() const override { return "RandomResizedCrop"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  int64_t h_, w_;
  std::pair<double, double> scale_, ratio_;
  Inter inter_;
  int max_attempts_;
};

class RandomHorizontalFlip : public TensorTransform {
 public:
  explicit RandomHorizontalFlip(double prob = 0.5);
  std::string name() const override { return "RandomHorizontalFlip"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  double prob_;
};

class RandomVerticalFlip : public TensorTransform {
 public:
  explicit RandomVerticalFlip(double prob = 0.5);
  std::string name() const override { return "RandomVerticalFlip"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  double prob_;
};

// Rotates counter-clockwise by an angle drawn uniformly from degrees {min, max} (a single value d
// means {-d, d}) about the image center. Multiples of 90° are exact. expand: the output grows to
// hold the whole rotated image; otherwise it keeps the input size. Uncovered pixels get fill_value.
class RandomRotation : public TensorTransform {
 public:
  explicit RandomRotation(std::vector<double> degrees, Inter resample = Inter::nearest,
                          bool expand = false, double fill_value = 0);
  std::string name() const override { return "RandomRotation"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  double lo_, hi_;
  Inter inter_;
  bool expand_;
  double fill_;
};

// out = in * rescale + shift, as f32.
class Rescale : public TensorTransform {
 public:
  Rescale(double rescale, double shift) : rescale_(float(rescale)), shift_(float(shift)) {}
  std::string name() const override { return "Rescale"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  float rescale_, shift_;
};

// out = (in - mean[c]) / std[c], as f32; channels last (is_hwc) or first.
class Normalize : public TensorTransform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std, bool is_hwc = true);
  std::string name() const override { return "Normalize"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  std::vector<float> mean_, inv_std_;
  bool is_hwc_;
};

// [H, W, C] -> [C, H, W] ([H, W] -> [1, H, W]).
class HWC2CHW : public TensorTransform {
 public:
  std::string name() const override { return "HWC2CHW"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;
};

using transforms::TypeCast;

// Codec helpers (used by Decode and ImageFolderDataset; the encoders make test and bench data).
enum class ImageFormat { unknown, jpeg, png };
ImageFormat detect_format(const uint8_t* data, size_t size);
Tensor decode_image(const uint8_t* data, size_t size, bool rgb);
std::vector<uint8_t> encode_png(const Tensor& image);  // u8 [H, W] or [H, W, 1|3|4]
std::vector<uint8_t> encode_jpeg(const Tensor& image, int quality = 90);  // u8 [H, W(, 1|3)]

}  // namespace kiln::data::vision
