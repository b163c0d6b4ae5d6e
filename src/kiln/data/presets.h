#pragma once
// Ready-made pipelines for the built-in jobs: the one Fashion-MNIST pipeline that `kiln train`,
// the examples and the training tests read.
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

struct FashionMnistPipelineOptions {
  std::string dataset_dir;      // empty: Debian's /usr/share/datasets/fashion-mnist
  std::string usage = "train";  // "train", "test" or "all"
  int64_t batch_size = 64;
  bool drop_remainder = true;
  bool shuffle = true;  // a fresh permutation each epoch (seeded by config::set_seed)
  bool augment = true;  // RandomCrop 28 with padding 2, RandomHorizontalFlip
  // Images become f32 (x / 255 - mean) / std; mean 0 and std 1 leave x / 255.
  double mean = 0.2860;
  double std = 0.3530;
  int num_parallel_workers = 0;  // augmentation's map workers; 0: config default
  int num_shards = 0;            // data parallel: one shard per rank
  int shard_id = 0;
  int64_t num_samples = 0;  // rows per epoch (per shard); 0: all
};

// Batches of u8 images [N, H, W, C] -> f32 [N, C, H, W] (channels-last memory) with value
// (x * scale - mean[c]) / std[c]; one mean and std serve every channel.
Op image_batch_to_float(double scale, std::vector<float> mean, std::vector<float> std);

// FashionMnistDataset -> [map(augment)] -> batch -> one conversion per batch of the u8 NHWC
// images to normalized f32 NCHW. Rows: "image" f32 [B, 1, 28, 28] and "label" i32 [B].
Dataset fashion_mnist_pipeline(const FashionMnistPipelineOptions& options = {});

}  // namespace kiln::data
