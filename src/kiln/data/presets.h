#pragma once
// Ready-made pipelines for the built-in jobs (kiln train's Fashion-MNIST default).
#include <string>

#include "kiln/data/dataset.h"

namespace kiln::dataset {

struct FashionMnistPipelineOptions {
  std::string dataset_dir;      // empty: Debian's /usr/share/datasets/fashion-mnist
  std::string usage = "train";  // "train", "test" or "all"
  int64_t batch_size = 64;
  bool drop_remainder = true;
  bool shuffle = true;           // a fresh permutation each epoch (seeded by config::set_seed)
  bool augment = true;           // RandomCrop 28 with padding 2, RandomHorizontalFlip
  bool normalize = true;         // (x / 255 - 0.2860) / 0.3530; else x / 255
  int num_parallel_workers = 0;  // map workers; 0: config default
  int num_shards = 0;            // data parallel: one shard per rank
  int shard_id = 0;
  int64_t num_samples = 0;  // rows per epoch (per shard); 0: all
};

// FashionMnistDataset -> map(augment, rescale/normalize, HWC2CHW) -> batch. Rows: "image" f32
// [B, 1, 28, 28] and "label" i32 [B].
Dataset fashion_mnist_pipeline(const FashionMnistPipelineOptions& options = {});

}  // namespace kiln::dataset
