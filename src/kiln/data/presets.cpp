#include "kiln/data/presets.h"

#include "kiln/data/vision.h"

namespace kiln::dataset {

Dataset fashion_mnist_pipeline(const FashionMnistPipelineOptions& o) {
  MnistOptions mo;
  mo.usage = o.usage;
  mo.shuffle = o.shuffle;
  mo.num_shards = o.num_shards;
  mo.shard_id = o.shard_id;
  mo.num_samples = o.num_samples;
  Dataset ds = FashionMnistDataset(o.dataset_dir, mo);
  std::vector<Op> ops;
  if (o.augment) {
    ops.push_back(vision::RandomCrop({28, 28}, {2}));
    ops.push_back(vision::RandomHorizontalFlip());
  }
  if (o.normalize) {
    // One pass: x * (1 / (255 * std)) - mean / std.
    constexpr double kMean = 0.2860, kStd = 0.3530;
    ops.push_back(vision::Rescale(1.0 / (255.0 * kStd), -kMean / kStd));
  } else {
    ops.push_back(vision::Rescale(1.0 / 255.0, 0.0));
  }
  ops.push_back(vision::HWC2CHW());
  MapOptions map_options;
  map_options.num_parallel_workers = o.num_parallel_workers;
  ds = ds.map(std::move(ops), {"image"}, {}, map_options);
  return ds.batch(o.batch_size, o.drop_remainder);
}

}  // namespace kiln::dataset
