#include "kiln/data/presets.h"

#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/data/vision.h"

namespace kiln::data {
namespace {

// u8 [N, H, W, C] -> f32 [N, C, H, W] with value (x * scale - mean[c]) / std[c], in one flat pass
// per batch. The result is stored channels-last (oneDNN's preferred input layout), which for C = 1
// is plain row-major. One mean and std serve every channel; C of them serve C channels.
class ImageBatchToFloat : public TensorTransform {
 public:
  ImageBatchToFloat(double scale, std::vector<float> mean, std::vector<float> std) {
    if (mean.empty() || mean.size() != std.size()) {
      throw Error(
          "ImageBatchToFloat: give as many means as standard deviations (one, or one per "
          "channel), got " +
          std::to_string(mean.size()) + " and " + std::to_string(std.size()));
    }
    for (size_t k = 0; k < mean.size(); ++k) {
      if (!(std[k] > 0))
        throw Error("ImageBatchToFloat: std must be > 0, got " + std::to_string(std[k]));
      scale_.push_back(float(scale / std[k]));
      shift_.push_back(-mean[k] / std[k]);
    }
  }
  std::string name() const override { return "ImageBatchToFloat"; }

  Tensor apply_one(const Tensor& input, RowRng&) const override {
    if (input.dtype() != DType::u8 || (input.rank() != 4 && input.rank() != 3)) {
      throw ShapeError("ImageBatchToFloat: expects u8 [N, H, W, C] (or [H, W, C]), got " +
                       describe(input));
    }
    const int64_t c = input.dim(-1);
    if (scale_.size() != 1 && int64_t(scale_.size()) != c) {
      throw ShapeError("ImageBatchToFloat: " + std::to_string(scale_.size()) +
                       " means and standard deviations for images of " + std::to_string(c) +
                       " channels (" + describe(input) + ")");
    }
    Tensor src = input.contiguous();
    const bool batched = input.rank() == 4;
    const int64_t n = batched ? input.dim(0) : 1;
    const int64_t h = input.dim(-3), w = input.dim(-2);
    Shape shape = batched ? Shape{n, c, h, w} : Shape{c, h, w};
    Tensor out = (batched && c > 1)
                     ? Tensor::empty_strided(shape, channels_last_strides(shape), DType::f32)
                     : Tensor::empty(shape, DType::f32);
    const uint8_t* s = src.data<uint8_t>();
    auto scale_of = [&](int64_t k) { return scale_[scale_.size() == 1 ? 0 : size_t(k)]; };
    auto shift_of = [&](int64_t k) { return shift_[shift_.size() == 1 ? 0 : size_t(k)]; };
    if (!batched && c > 1) {
      // [C, H, W] rows are rare (unbatched use); write planar.
      float* d = out.data<float>();
      for (int64_t y = 0; y < h * w; ++y) {
        for (int64_t k = 0; k < c; ++k)
          d[k * h * w + y] = float(s[y * c + k]) * scale_of(k) + shift_of(k);
      }
      return out;
    }
    // NHWC memory in, NHWC memory out: one flat pass.
    float* d = static_cast<float*>(out.raw_data());
    const int64_t total = src.numel();
    if (scale_.size() == 1) {
      const float scale = scale_[0], shift = shift_[0];
#pragma omp simd
      for (int64_t i = 0; i < total; ++i) d[i] = float(s[i]) * scale + shift;
      return out;
    }
    for (int64_t i = 0; i < total; i += c) {
      for (int64_t k = 0; k < c; ++k)
        d[i + k] = float(s[i + k]) * scale_[size_t(k)] + shift_[size_t(k)];
    }
    return out;
  }

 private:
  std::vector<float> scale_, shift_;
};

}  // namespace

Op image_batch_to_float(double scale, std::vector<float> mean, std::vector<float> std) {
  return ImageBatchToFloat(scale, std::move(mean), std::move(std));
}

Dataset fashion_mnist_pipeline(const FashionMnistPipelineOptions& o) {
  if (o.batch_size <= 0) {
    throw Error("fashion_mnist_pipeline: batch_size must be > 0, got " +
                std::to_string(o.batch_size));
  }
  MnistOptions mo;
  mo.usage = o.usage;
  mo.shuffle = o.shuffle;
  mo.num_shards = o.num_shards;
  mo.shard_id = o.shard_id;
  mo.num_samples = o.num_samples;
  Dataset ds = FashionMnistDataset(o.dataset_dir, mo);
  if (o.augment) {
    MapOptions map_options;
    map_options.num_parallel_workers = o.num_parallel_workers;
    ds = ds.map({vision::RandomCrop({28, 28}, {2}), vision::RandomHorizontalFlip()}, {"image"}, {},
                map_options);
  }
  return ds.batch(o.batch_size, o.drop_remainder)
      .map({image_batch_to_float(1.0 / 255.0, {float(o.mean)}, {float(o.std)})}, {"image"}, {},
           {.num_parallel_workers = 1});  // one cheap pass per batch: one worker is plenty
}

}  // namespace kiln::data
