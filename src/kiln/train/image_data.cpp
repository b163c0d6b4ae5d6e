#include "kiln/train/image_data.h"

#include <filesystem>

#include "kiln/core/error.h"

namespace kiln::train {

ImageBatchToFloat::ImageBatchToFloat(double scale, double mean, double std)
    : scale_(float(scale / std)), shift_(float(-mean / std)) {
  if (!(std > 0)) throw Error("ImageBatchToFloat: std must be > 0, got " + std::to_string(std));
}

Tensor ImageBatchToFloat::apply_one(const Tensor& input, dataset::RowRng&) const {
  if (input.dtype() != DType::u8 || (input.rank() != 4 && input.rank() != 3)) {
    throw ShapeError("ImageBatchToFloat: expects u8 [N, H, W, C] (or [H, W, C]), got " +
                     describe(input));
  }
  Tensor src = input.contiguous();
  const bool batched = input.rank() == 4;
  const int64_t n = batched ? input.dim(0) : 1;
  const int64_t h = input.dim(-3), w = input.dim(-2), c = input.dim(-1);
  Shape shape = batched ? Shape{n, c, h, w} : Shape{c, h, w};
  Tensor out = (batched && c > 1)
                   ? Tensor::empty_strided(shape, channels_last_strides(shape), DType::f32)
                   : Tensor::empty(shape, DType::f32);
  if (!batched && c > 1) {
    // [C, H, W] rows are rare (unbatched use); write planar.
    const uint8_t* s = src.data<uint8_t>();
    float* d = out.data<float>();
    for (int64_t y = 0; y < h * w; ++y) {
      for (int64_t k = 0; k < c; ++k) d[k * h * w + y] = float(s[y * c + k]) * scale_ + shift_;
    }
    return out;
  }
  // NHWC memory in, NHWC memory out: one flat pass.
  const uint8_t* s = src.data<uint8_t>();
  float* d = static_cast<float*>(out.raw_data());
  const int64_t total = src.numel();
  const float scale = scale_, shift = shift_;
#pragma omp simd
  for (int64_t i = 0; i < total; ++i) d[i] = float(s[i]) * scale + shift;
  return out;
}

std::string find_fashion_mnist(const std::string& data_dir, const std::string& usage) {
  namespace fs = std::filesystem;
  std::string dir = data_dir.empty() ? dataset::kDebianFashionMnistDir : data_dir;
  std::string prefix = usage == "test" ? "t10k" : "train";
  for (const char* kind : {"images-idx3-ubyte", "labels-idx1-ubyte"}) {
    fs::path base = fs::path(dir) / (prefix + "-" + kind);
    if (!fs::exists(base) && !fs::exists(base.string() + ".gz")) {
      throw Error("Fashion-MNIST not found: " + base.string() +
                  "[.gz] is missing. Install it "
                  "with `apt-get install dataset-fashion-mnist` or pass --data-dir DIR");
    }
  }
  return dir;
}

dataset::Dataset fashion_mnist(const FashionMnistOptions& o) {
  if (o.usage != "train" && o.usage != "test") {
    throw Error("fashion_mnist: usage must be train or test, got '" + o.usage + "'");
  }
  if (o.batch_size <= 0) {
    throw Error("fashion_mnist: batch_size must be > 0, got " + std::to_string(o.batch_size));
  }
  std::string dir = find_fashion_mnist(o.data_dir, o.usage);
  dataset::Dataset ds = dataset::FashionMnistDataset(
      dir, {.usage = o.usage, .shuffle = o.shuffle, .num_samples = o.num_samples});
  return ds.batch(o.batch_size, o.drop_remainder)
      .map({ImageBatchToFloat(o.scale, o.mean, o.std)}, {"image"}, {},
           {.num_parallel_workers = 1});  // one cheap pass per batch: one worker is plenty
}

}  // namespace kiln::train
