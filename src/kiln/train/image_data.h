#pragma once
// Image-classification input for training: the batched u8 NHWC images of a pipeline turned into
// normalized f32 NCHW in one pass per batch (one transform call per batch, not per row).
#include <string>

#include "kiln/data/dataset.h"
#include "kiln/data/transform.h"

namespace kiln::train {

// u8 [N, H, W, C] -> f32 [N, C, H, W] with value (x * scale - mean) / std. The result is stored
// channels-last (oneDNN's preferred input layout), which for C = 1 is plain row-major.
class ImageBatchToFloat : public dataset::TensorTransform {
 public:
  ImageBatchToFloat(double scale, double mean, double std);
  std::string name() const override { return "ImageBatchToFloat"; }
  Tensor apply_one(const Tensor& input, dataset::RowRng& rng) const override;

 private:
  float scale_, shift_;
};

struct FashionMnistOptions {
  std::string data_dir;         // empty: /usr/share/datasets/fashion-mnist (dataset-fashion-mnist)
  std::string usage = "train";  // "train" or "test"
  int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_remainder = true;
  double scale = 1.0 / 255.0;
  double mean = 0.0;  // applied after scaling
  double std = 1.0;
  int64_t num_samples = 0;  // 0: all
};

// Fashion-MNIST batches of (f32 [N, 1, 28, 28], i32 [N]). A missing data set is an Error that
// says to install dataset-fashion-mnist or pass the folder.
dataset::Dataset fashion_mnist(const FashionMnistOptions& options);

// Folder holding the Fashion-MNIST files, or an Error naming what is missing and how to get it.
std::string find_fashion_mnist(const std::string& data_dir, const std::string& usage);

}  // namespace kiln::train
