// Dataset: building the immutable plan, with argument checks at construction.
#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

#include "kiln/comm/communicator.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel_context.h"
#include "kiln/data/config.h"
#include "kiln/data/detail/node.h"
#include "kiln/data/detail/pipeline.h"

namespace kiln::data {

using detail::DatasetNode;
using detail::NodeKind;

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += v[i];
  }
  return s + "]";
}

int column_index(const std::vector<std::string>& columns, const std::string& name,
                 const char* where) {
  auto it = std::find(columns.begin(), columns.end(), name);
  if (it == columns.end()) {
    throw Error(kiln::detail::concat(where, ": column '", name, "' is not one of ", join(columns)));
  }
  return int(it - columns.begin());
}

void check_unique(const std::vector<std::string>& columns, const char* where) {
  std::set<std::string> seen;
  for (auto& c : columns) {
    if (!seen.insert(c).second) {
      throw Error(
          kiln::detail::concat(where, ": column '", c, "' appears twice in ", join(columns)));
    }
  }
}

std::shared_ptr<DatasetNode> child_node(const std::shared_ptr<const DatasetNode>& child,
                                        NodeKind kind, const char* what) {
  if (!child) throw Error(std::string(what) + " on an empty Dataset");
  auto n = std::make_shared<DatasetNode>();
  n->kind = kind;
  n->children = {child};
  n->columns = child->columns;
  return n;
}

}  // namespace

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
  RowRng r(a ^ 0x243f6a8885a308d3ull);
  uint64_t x = r.next_u64() ^ b;
  RowRng r2(x * 0x9e3779b97f4a7c15ull + 0x13198a2e03707344ull);
  uint64_t y = r2.next_u64() ^ c;
  return RowRng(y).next_u64();
}

std::string describe_row(const Row& row) {
  if (row.source) return row.source->describe(row.index);
  return "batch " + std::to_string(row.index);
}

std::unique_ptr<SourceReader> Source::make_reader() const {
  throw Error(name() + " is not a random-access source");
}

void SourceReader::read_many(const std::vector<int64_t>& indices, std::vector<Row>& rows) {
  for (size_t k = 0; k < indices.size(); ++k) read(indices[k], rows[k].columns);
}

std::unique_ptr<SequentialReader> Source::make_sequential_reader() const {
  struct ByIndex : SequentialReader {
    std::unique_ptr<SourceReader> reader;
    int64_t next_index = 0, n = 0;
    bool next(std::vector<Tensor>& columns) override {
      if (next_index >= n) return false;
      reader->read(next_index++, columns);
      return true;
    }
  };
  auto r = std::make_unique<ByIndex>();
  r->reader = make_reader();
  r->n = num_rows();
  return r;
}

std::string Source::describe(int64_t index) const {
  return "row " + std::to_string(index) + " of " + name();
}

void TensorTransform::apply(std::vector<Tensor>& columns, RowRng& rng) const {
  if (columns.size() != 1) {
    throw Error(kiln::detail::concat(name(), " takes one column, got ", columns.size()));
  }
  columns[0] = apply_one(columns[0], rng);
}

Tensor TensorTransform::apply_one(const Tensor&, RowRng&) const {
  throw Error(name() + " does not implement apply_one(); it takes several columns");
}

Dataset Dataset::from_source(std::shared_ptr<const Source> source, const SourceOptions& options) {
  if (!source) throw Error("Dataset::from_source: source is null");
  const std::string name = source->name();
  if (options.num_shards < 0) {
    throw Error(kiln::detail::concat(name, ": num_shards must be >= 0, got ", options.num_shards));
  }
  if (options.num_shards > 0 && (options.shard_id < 0 || options.shard_id >= options.num_shards)) {
    throw Error(kiln::detail::concat(name, ": shard_id ", options.shard_id,
                                     " must be in [0, num_shards) with num_shards ",
                                     options.num_shards));
  }
  if (options.num_shards == 0 && options.shard_id != 0) {
    throw Error(
        kiln::detail::concat(name, ": shard_id ", options.shard_id, " given without num_shards"));
  }
  if (options.num_samples < 0) {
    throw Error(
        kiln::detail::concat(name, ": num_samples must be >= 0, got ", options.num_samples));
  }
  if (options.num_parallel_workers < 0) {
    throw Error(kiln::detail::concat(name, ": num_parallel_workers must be >= 0, got ",
                                     options.num_parallel_workers));
  }
  if (!source->random_access()) {
    if (options.shuffle.value_or(false)) {
      throw Error(name + ": shuffle needs a random-access source (this one is iterable only)");
    }
    if (options.num_shards > 1) {
      throw Error(name + ": num_shards needs a random-access source (this one is iterable only)");
    }
  }
  auto n = std::make_shared<DatasetNode>();
  n->kind = NodeKind::source;
  n->columns = source->column_names();
  check_unique(n->columns, name.c_str());
  n->source_options = options;
  // Data parallel: each rank reads its shard unless the user chose the sharding (MindSpore's
  // behaviour). Iterable-only sources cannot be sharded by the engine; every rank reads them.
  const AutoParallelContext& parallel = get_auto_parallel_context();
  if (options.num_shards == 0 && parallel.parallel_mode == ParallelMode::DATA_PARALLEL &&
      parallel.dataset_shard_by_rank && comm::size() > 1 && source->random_access()) {
    n->source_options.num_shards = comm::size();
    n->source_options.shard_id = comm::rank();
  }
  n->source = std::move(source);
  return Dataset(std::move(n));
}

Dataset Dataset::map(std::vector<Op> operations, std::vector<std::string> input_columns,
                     std::vector<std::string> output_columns, MapOptions options) const {
  auto n = child_node(node_, NodeKind::map, "map");
  if (operations.empty()) throw Error("map: operations is empty");
  for (auto& op : operations) {
    if (!op.ptr()) throw Error("map: operations holds a null transform");
  }
  if (options.num_parallel_workers < 0) {
    throw Error(kiln::detail::concat("map: num_parallel_workers must be >= 0, got ",
                                     options.num_parallel_workers));
  }
  const auto& in_cols = node_->columns;
  if (input_columns.empty()) {
    if (in_cols.empty()) throw Error("map: the dataset has no columns");
    input_columns = {in_cols[0]};
  }
  if (output_columns.empty()) output_columns = input_columns;
  check_unique(input_columns, "map: input_columns");
  check_unique(output_columns, "map: output_columns");
  std::vector<bool> consumed(in_cols.size(), false);
  int first = int(in_cols.size());
  for (auto& c : input_columns) {
    int k = column_index(in_cols, c, "map: input_columns");
    n->input_index.push_back(k);
    consumed[size_t(k)] = true;
    first = std::min(first, k);
  }
  // Outputs replace the inputs at the first input's position; other columns keep their order.
  std::vector<std::string> cols;
  for (int k = 0; k <= int(in_cols.size()); ++k) {
    if (k == first) {
      for (size_t o = 0; o < output_columns.size(); ++o) {
        n->output_plan.push_back(-1 - int(o));
        cols.push_back(output_columns[o]);
      }
    }
    if (k < int(in_cols.size()) && !consumed[size_t(k)]) {
      n->output_plan.push_back(k);
      cols.push_back(in_cols[size_t(k)]);
    }
  }
  check_unique(cols, "map: output_columns (with the columns kept)");
  n->columns = std::move(cols);
  n->num_outputs = int(output_columns.size());
  n->ops = std::move(operations);
  n->map_options = options;
  return Dataset(std::move(n));
}

Dataset Dataset::shuffle(int64_t buffer_size) const {
  auto n = child_node(node_, NodeKind::shuffle, "shuffle");
  if (buffer_size < 2) {
    throw Error(kiln::detail::concat("shuffle: buffer_size must be at least 2, got ", buffer_size));
  }
  n->count = buffer_size;
  return Dataset(std::move(n));
}

Dataset Dataset::batch(int64_t batch_size, bool drop_remainder, BatchOptions options) const {
  auto n = child_node(node_, NodeKind::batch, "batch");
  if (batch_size <= 0) {
    throw Error(kiln::detail::concat("batch: batch_size must be positive, got ", batch_size));
  }
  if (options.num_parallel_workers < 0) {
    throw Error(kiln::detail::concat("batch: num_parallel_workers must be >= 0, got ",
                                     options.num_parallel_workers));
  }
  for (auto& [col, info] : options.pad_info) column_index(n->columns, col, "batch: pad_info");
  n->batch_size = batch_size;
  n->drop_remainder = drop_remainder;
  n->batch_options = std::move(options);
  return Dataset(std::move(n));
}

Dataset Dataset::repeat(int64_t count) const {
  auto n = child_node(node_, NodeKind::repeat, "repeat");
  if (count == 0 || count < -1) {
    throw Error(
        kiln::detail::concat("repeat: count must be positive or -1 (forever), got ", count));
  }
  n->count = count;
  return Dataset(std::move(n));
}

Dataset Dataset::skip(int64_t count) const {
  auto n = child_node(node_, NodeKind::skip, "skip");
  if (count < 0) throw Error(kiln::detail::concat("skip: count must be >= 0, got ", count));
  n->count = count;
  return Dataset(std::move(n));
}

Dataset Dataset::take(int64_t count) const {
  auto n = child_node(node_, NodeKind::take, "take");
  if (count == 0 || count < -1) {
    throw Error(kiln::detail::concat("take: count must be positive or -1 (all), got ", count));
  }
  n->count = count;
  return Dataset(std::move(n));
}

Dataset Dataset::project(std::vector<std::string> columns) const {
  auto n = child_node(node_, NodeKind::project, "project");
  if (columns.empty()) throw Error("project: columns is empty");
  check_unique(columns, "project: columns");
  for (auto& c : columns) n->project_index.push_back(column_index(node_->columns, c, "project"));
  n->columns = std::move(columns);
  return Dataset(std::move(n));
}

Dataset Dataset::rename(std::vector<std::string> input_columns,
                        std::vector<std::string> output_columns) const {
  auto n = child_node(node_, NodeKind::rename, "rename");
  if (input_columns.size() != output_columns.size()) {
    throw Error(kiln::detail::concat("rename: input_columns has ", input_columns.size(),
                                     " names but output_columns has ", output_columns.size()));
  }
  for (size_t i = 0; i < input_columns.size(); ++i) {
    int k = column_index(node_->columns, input_columns[i], "rename: input_columns");
    n->columns[size_t(k)] = output_columns[i];
  }
  check_unique(n->columns, "rename: output_columns");
  return Dataset(std::move(n));
}

Dataset Dataset::zip(std::vector<Dataset> others) const {
  auto n = child_node(node_, NodeKind::zip, "zip");
  for (auto& d : others) {
    if (!d.node_) throw Error("zip: an empty Dataset in datasets");
    n->children.push_back(d.node_);
    n->columns.insert(n->columns.end(), d.node_->columns.begin(), d.node_->columns.end());
  }
  check_unique(n->columns, "zip: the datasets' columns (rename or project first)");
  return Dataset(std::move(n));
}

Dataset zip(std::vector<Dataset> datasets) {
  if (datasets.empty()) throw Error("zip: datasets is empty");
  Dataset first = datasets[0];
  datasets.erase(datasets.begin());
  return first.zip(std::move(datasets));
}

Dataset Dataset::concat(std::vector<Dataset> others) const {
  auto n = child_node(node_, NodeKind::concat, "concat");
  for (auto& d : others) {
    if (!d.node_) throw Error("concat: an empty Dataset in datasets");
    if (d.node_->columns != n->columns) {
      throw Error("concat: columns " + join(d.node_->columns) + " differ from " + join(n->columns));
    }
    n->children.push_back(d.node_);
  }
  return Dataset(std::move(n));
}

int64_t Dataset::get_dataset_size() const {
  if (!node_) throw Error("get_dataset_size on an empty Dataset");
  return detail::dataset_size(*node_);
}

std::vector<std::string> Dataset::get_col_names() const {
  if (!node_) throw Error("get_col_names on an empty Dataset");
  return node_->columns;
}

int64_t Dataset::get_batch_size() const {
  for (const DatasetNode* n = node_.get(); n;
       n = n->children.empty() ? nullptr : n->children[0].get()) {
    if (n->kind == NodeKind::batch) return n->batch_size;
  }
  return 1;
}

std::string Dataset::describe() const {
  // Source first; the inputs of a zip or concat are indented under it.
  std::vector<std::string> lines;
  std::function<void(const DatasetNode&, int)> walk = [&](const DatasetNode& n, int depth) {
    int child_depth = n.children.size() > 1 ? depth + 1 : depth;
    for (auto& c : n.children) walk(*c, child_depth);
    lines.push_back(std::string(size_t(2 * depth), ' ') + n.stage_name() + " -> " +
                    join(n.columns));
  };
  if (node_) walk(*node_, 0);
  std::string s;
  for (auto& l : lines) s += l + "\n";
  return s;
}

namespace detail {

int64_t sampled_rows(int64_t n, const SourceOptions& opt) {
  if (n < 0) return -1;
  if (opt.num_shards > 1) n = (n + opt.num_shards - 1) / opt.num_shards;
  if (opt.num_samples > 0) n = std::min(n, opt.num_samples);
  return n;
}

int64_t dataset_size(const DatasetNode& n) {
  auto child = [&](size_t i = 0) { return dataset_size(*n.children[i]); };
  switch (n.kind) {
    case NodeKind::source:
      return sampled_rows(n.source->num_rows(), n.source_options);
    case NodeKind::map:
    case NodeKind::shuffle:
    case NodeKind::project:
    case NodeKind::rename:
      return child();
    case NodeKind::batch: {
      int64_t c = child();
      if (c < 0) return -1;
      return n.drop_remainder ? c / n.batch_size : (c + n.batch_size - 1) / n.batch_size;
    }
    case NodeKind::repeat: {
      int64_t c = child();
      return (c < 0 || n.count < 0) ? -1 : c * n.count;
    }
    case NodeKind::skip: {
      int64_t c = child();
      return c < 0 ? -1 : std::max<int64_t>(0, c - n.count);
    }
    case NodeKind::take: {
      int64_t c = child();
      if (n.count < 0) return c;
      return c < 0 ? n.count : std::min(c, n.count);
    }
    case NodeKind::zip: {
      int64_t m = -1;
      for (size_t i = 0; i < n.children.size(); ++i) {
        int64_t c = child(i);
        if (c >= 0) m = m < 0 ? c : std::min(m, c);
      }
      return m;
    }
    case NodeKind::concat: {
      int64_t s = 0;
      for (size_t i = 0; i < n.children.size(); ++i) {
        int64_t c = child(i);
        if (c < 0) return -1;
        s += c;
      }
      return s;
    }
  }
  return -1;
}

std::string DatasetNode::stage_name() const {
  switch (kind) {
    case NodeKind::source:
      return source->name();
    case NodeKind::map: {
      std::string s = "map[";
      for (size_t i = 0; i < ops.size(); ++i) {
        if (i) s += ",";
        s += ops[i]->name();
      }
      return s + "]";
    }
    case NodeKind::shuffle:
      return "shuffle(" + std::to_string(count) + ")";
    case NodeKind::batch:
      return "batch(" + std::to_string(batch_size) + ")";
    case NodeKind::repeat:
      return "repeat(" + std::to_string(count) + ")";
    case NodeKind::skip:
      return "skip(" + std::to_string(count) + ")";
    case NodeKind::take:
      return "take(" + std::to_string(count) + ")";
    case NodeKind::project:
      return "project";
    case NodeKind::rename:
      return "rename";
    case NodeKind::zip:
      return "zip";
    case NodeKind::concat:
      return "concat";
  }
  return "?";
}

}  // namespace detail
}  // namespace kiln::data
