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

// The channels a decode gives. A decode never yields alpha: always 1 or 3 channels.
enum class ColorMode {
  rgb,   // 3 (MindSpore's default); a grayscale file's value is repeated
  gray,  // 1; a colour file becomes its luma
  file,  // the file's own: 1 for a grayscale file (PNG gray, 1-component JPEG), else 3
};

// Encoded bytes (u8 [n]) -> u8 [H, W, C]. JPEG or PNG, told apart by their magic bytes.
// Decode() and Decode(true) give RGB; Decode(false) the file's own channels. A set of images
// whose files differ gives rows of different channels: ImageFolderDataset's decode and the CLI
// pick one mode for the whole set instead (image_folder_channels() in dataset.h).
class Decode : public TensorTransform {
 public:
  explicit Decode(bool rgb = true) : mode_(rgb ? ColorMode::rgb : ColorMode::file) {}
  explicit Decode(ColorMode mode) : mode_(mode) {}
  std::string name() const override { return "Decode"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  ColorMode mode_;
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
Tensor decode_image(const uint8_t* data, size_t size, ColorMode mode);
inline Tensor decode_image(const uint8_t* data, size_t size, bool rgb) {
  return decode_image(data, size, rgb ? ColorMode::rgb : ColorMode::file);
}
// The channels ColorMode::file decodes `data` to (1 or 3), read from the header alone; 0 when the
// header is not within `size` bytes (a JPEG frame header behind large metadata). Error when
// `data` is neither JPEG nor PNG.
int64_t encoded_image_channels(const uint8_t* data, size_t size);
// ColorMode::gray for 1 channel, rgb for 3 (Error naming `what` otherwise).
ColorMode color_mode_for_channels(int64_t channels, const std::string& what);
std::vector<uint8_t> encode_png(const Tensor& image);  // u8 [H, W] or [H, W, 1|2|3|4]
std::vector<uint8_t> encode_jpeg(const Tensor& image, int quality = 90);  // u8 [H, W(, 1|3)]

}  // namespace kiln::data::vision
