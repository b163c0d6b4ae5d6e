#pragma once
// Runs a pipeline alone, without training, and measures it (`kiln data bench`).
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

struct BenchOptions {
  std::string source = "fashion-mnist:train";  // see source_registry.h
  bool decode = false;                         // put Decode first in the map
  int channels = 0;  // what Decode gives: 0: the data's (image_folder_channels()'s rule), 1 or 3
  std::vector<std::string> transforms;  // names, see make_named_transform()
  int64_t batch_size = 64;
  bool drop_remainder = true;
  int workers = 0;         // map workers; 0: config default (the machine's cores)
  int source_workers = 0;  // 0: the source's default
  int batch_workers = 1;
  int64_t epochs = 1;
  bool shuffle = false;    // shuffle in the source
  int prefetch = 0;        // rows per queue; 0: config default
  int rows_per_block = 0;  // rows per queue hand-off; 0: config default
};

struct BenchResult {
  double seconds = 0;
  int64_t rows = 0;  // samples
  int64_t batches = 0;
  int workers = 0;
  double samples_per_sec = 0;
  double peak_rss_mb = 0;
  std::string pipeline;  // Dataset::describe()
  PipelineStats stats;
  // {"samples_per_sec":..,"rows":..,"batches":..,"workers":..,"peak_rss_mb":..,"seconds":..,
  //  "source":..,"transforms":[..],"batch_size":..,"epochs":..,"pipeline":{stats}}
  std::string to_json(const BenchOptions& options) const;
};

// "rescale" (1/255, 0), "hflip", "vflip", "hwc2chw", "normalize" (mean 0.5, std 0.5 per channel,
// on 0..1 data: use after rescale), "randomcrop[:S]" (S x S with padding 4; default 28),
// "centercrop:S", "resize:S", "randomresizedcrop:S", "rotate[:D]" (RandomRotation ±D, default 90),
// "decode" (the file's own channels; build_bench_pipeline decodes as BenchOptions::channels says),
// "typecast:f32". Throws naming the unknown transform.
Op make_named_transform(const std::string& spec);

// The channels the benchmark decodes to: `channels` when given, else the rule of
// image_folder_channels() over the source's images (an image folder's file headers; any other
// source's rows, read once).
int64_t bench_decode_channels(const BenchOptions& options);

// Builds the benchmark's pipeline: source -> map(transforms) -> batch.
Dataset build_bench_pipeline(const BenchOptions& options);
BenchResult run_data_bench(const BenchOptions& options);

}  // namespace kiln::data
