#pragma once
// The immutable plan a Dataset describes (internal): one node per source or stage.
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data::detail {

enum class NodeKind {
  source,
  map,
  shuffle,
  batch,
  repeat,
  skip,
  take,
  project,
  rename,
  zip,
  concat
};

struct DatasetNode {
  NodeKind kind = NodeKind::source;
  std::vector<std::shared_ptr<const DatasetNode>> children;
  std::vector<std::string> columns;  // output columns, in order

  // source
  std::shared_ptr<const Source> source;
  SourceOptions source_options;
  // map: inputs are columns `input_index` of the child; the output row is built by `output_plan`:
  // entry >= 0 takes the child's column, entry < 0 takes result -1 - entry.
  std::vector<Op> ops;
  std::vector<int> input_index;
  std::vector<int> output_plan;
  int num_outputs = 0;
  MapOptions map_options;
  // shuffle (buffer size), repeat, skip, take
  int64_t count = 0;
  // batch
  int64_t batch_size = 1;
  bool drop_remainder = false;
  BatchOptions batch_options;
  // project: the child's columns to keep, in the new order
  std::vector<int> project_index;

  std::string stage_name() const;  // "map[Decode,RandomCrop]", "batch(64)", ...
};

int64_t dataset_size(const DatasetNode& node);
// Rows a random-access source yields per epoch after sharding and num_samples.
int64_t sampled_rows(int64_t num_rows, const SourceOptions& options);

}  // namespace kiln::data::detail
