#pragma once
// RecordDataset: record files as a source of the data pipeline (MindSpore's MindDataset).
//
//   auto ds = kiln::data::RecordDataset("train.krec0", {"image", "label"},
//                                          {.shuffle = RecordShuffle::global,
//                                           .num_shards = 4, .shard_id = rank})
//                 .map({vision::Decode()}, {"image"})
//                 .batch(64);
//
// Columns become tensors: int32 -> i32 [], int64 -> i64 [], float32 -> f32 [], float64 -> f32 []
// (Kiln has no f64 tensors), string and bytes -> u8 [n], ndarray -> its element type (float64 ->
// f32) with the row's shape.
//
// Shuffle modes (MindSpore's Shuffle): `global` permutes all rows each epoch; `files` permutes the
// order of the shard files each epoch and reads each file front to back; `infile` keeps the file
// order and permutes the rows inside each file; `none` reads in written order. Sharding follows
// the other sources exactly: each epoch's order is shared by all shards, shard k takes positions
// k, k + num_shards, ... wrapping around so every shard gets ceil(rows / num_shards) rows, then
// num_samples caps it. `global` and `none` read through the engine (parallel workers);
// `files` and `infile` read sequentially in one thread (they exist to keep reads page-friendly).
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/record/record_reader.h"

namespace kiln::data {

enum class RecordShuffle { none, global, files, infile };

struct RecordDatasetOptions {
  int num_parallel_workers = 0;  // 0: the source's default (2 readers)
  RecordShuffle shuffle = RecordShuffle::global;
  int64_t num_samples = 0;
  int num_shards = 0;
  int shard_id = 0;
  bool verify_checksums = true;  // recompute each record's CRC-32C while reading
};

class RecordDataset : public Dataset {
 public:
  // One file: it and every sibling shard of its set. `columns` empty: every field, in order.
  RecordDataset(const std::string& file, std::vector<std::string> columns = {},
                RecordDatasetOptions options = {});
  // Exactly these shard files.
  RecordDataset(const std::vector<std::string>& files, std::vector<std::string> columns = {},
                RecordDatasetOptions options = {});
};

// "global" / "files" / "infile" / "none" (also "true" = global, "false" = none).
RecordShuffle record_shuffle_from_name(const std::string& name);

// The "record" scheme of the source registry (source_registry.h lists it with the other built-in
// sources), so `kiln data bench --source record:FILE[,FILE...][:global|files|infile|none]` and
// config files can name record files: one file opens its whole set, several open exactly those.
Dataset record_source(const std::string& arg, const SourceOptions& options);

// The tensors of one decoded row (for the fields at `fields`, in that order).
void record_row_to_tensors(const record::RowView& row, const std::vector<int>& fields,
                           std::vector<Tensor>& out);

}  // namespace kiln::data
