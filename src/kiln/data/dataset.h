#pragma once
// The data pipeline API, with MindSpore's names and semantics. Option structs stand in for
// keyword arguments:
//
//   using namespace kiln::data;
//   auto ds = FashionMnistDataset("", {.usage = "train", .shuffle = true})
//                 .map({vision::Rescale(1.0 / 255, 0), vision::HWC2CHW()}, {"image"})
//                 .batch(64, /*drop_remainder=*/true);
//   auto it = ds.create_tuple_iterator({.num_epochs = 2});
//   for (int epoch = 0; epoch < 2; ++epoch)
//     for (std::vector<Tensor> row; it.next(row);) train_step(row[0], row[1]);
//
// A Dataset is an immutable description; each iterator runs its own copy of the pipeline: every
// stage in its own threads, joined by bounded queues (so memory is bounded by the queue sizes,
// never by the data set), with rows moving between stages in blocks.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/data/source.h"
#include "kiln/data/stats.h"
#include "kiln/data/transform.h"

namespace kiln::data {

namespace detail {
struct DatasetNode;
class Pipeline;
}  // namespace detail

struct MapOptions {
  int num_parallel_workers = 0;  // 0: config::get_num_parallel_workers()
  int prefetch_size = 0;         // output queue, in rows; 0: config::get_prefetch_size()
};

struct PadInfo {
  Shape shape = {};  // empty: pad to the largest row of the batch; -1 in a dim: that dim's largest
  double value = 0;  // fill value
};

// Where a batch is: its number in its epoch and the epoch's, both from 0 (MindSpore's BatchInfo).
struct BatchInfo {
  int64_t batch_num = 0;
  int64_t epoch_num = 0;
};
// MindSpore's per_batch_map: gets a batch's rows before they are collated, one list per column
// (columns[c][r]), and may change them in place: values, shapes (then collated as pad_info says)
// and the number of rows, which must stay the same in every column.
using PerBatchMap =
    std::function<void(std::vector<std::vector<Tensor>>& columns, const BatchInfo&)>;

struct BatchOptions {
  int num_parallel_workers = 1;                  // threads copying rows into batch tensors
  std::map<std::string, PadInfo> pad_info = {};  // columns whose rows may differ in shape
  int prefetch_size = 0;
  PerBatchMap per_batch_map = {};  // runs on the batch stage's threads
};

struct IteratorOptions {
  std::vector<std::string> columns = {};  // empty: all, in order
  int64_t num_epochs = -1;                // -1: as many as the consumer asks for
  bool print_summary = false;             // print the stage summary to stderr at each epoch's end
  // Called about every 100 ms while next() waits for a row; an exception it throws leaves next()
  // (the iterator stays usable). A binding checks for Ctrl-C here.
  std::function<void()> on_wait = {};
};

class TupleIterator;
class DictIterator;

class Dataset {
 public:
  Dataset() = default;
  // Wraps any source (record files, say): the engine adds sampling, sharding and parallel reads.
  static Dataset from_source(std::shared_ptr<const Source> source, const SourceOptions& options);

  // Applies `operations` in order to `input_columns` (default: the first column); the results
  // replace them under `output_columns` (default: input_columns). Rows keep their order whatever
  // the worker count.
  Dataset map(std::vector<Op> operations, std::vector<std::string> input_columns = {},
              std::vector<std::string> output_columns = {}, MapOptions options = {}) const;
  Dataset shuffle(int64_t buffer_size) const;
  Dataset batch(int64_t batch_size, bool drop_remainder = false, BatchOptions options = {}) const;
  Dataset repeat(int64_t count = -1) const;  // -1: forever
  Dataset skip(int64_t count) const;
  Dataset take(int64_t count) const;
  Dataset project(std::vector<std::string> columns) const;
  Dataset rename(std::vector<std::string> input_columns,
                 std::vector<std::string> output_columns) const;
  Dataset zip(std::vector<Dataset> others) const;
  Dataset concat(std::vector<Dataset> others) const;
  Dataset operator+(const Dataset& other) const { return concat({other}); }

  // Rows (batches after batch) per epoch; -1 when unknown (an iterable generator).
  int64_t get_dataset_size() const;
  std::vector<std::string> get_col_names() const;
  int64_t get_batch_size() const;  // 1 without a batch stage

  TupleIterator create_tuple_iterator(IteratorOptions options = {}) const;
  DictIterator create_dict_iterator(IteratorOptions options = {}) const;

  // Readable plan: one stage per line, source first.
  std::string describe() const;
  const std::shared_ptr<const detail::DatasetNode>& node() const { return node_; }

 protected:
  explicit Dataset(std::shared_ptr<const detail::DatasetNode> node) : node_(std::move(node)) {}
  std::shared_ptr<const detail::DatasetNode> node_;
};

Dataset zip(std::vector<Dataset> datasets);

// Runs a pipeline. Rows arrive in order; next() returns false at each epoch's end, and the next
// call starts the following epoch (until num_epochs are done). Errors raised anywhere in the
// pipeline are rethrown here as kiln::Error naming the stage, the transform and the row; every
// pipeline thread has stopped by then. Destroying the iterator stops and joins all threads.
class TupleIterator {
 public:
  TupleIterator(TupleIterator&&) noexcept;
  TupleIterator& operator=(TupleIterator&&) noexcept;
  ~TupleIterator();

  bool next(std::vector<Tensor>& row);
  std::vector<std::string> column_names() const;
  int64_t epoch() const;  // epochs finished so far
  // Statistics so far (and the bottleneck diagnosis).
  PipelineStats stats() const;
  std::string summary() const { return stats().summary(); }
  // Stops the pipeline now and joins its threads.
  void stop();

  // Range-for over one epoch: `for (auto& row : it) ...`.
  struct End {};
  class Cursor {
   public:
    explicit Cursor(TupleIterator* it) : it_(it) { advance(); }
    const std::vector<Tensor>& operator*() const { return row_; }
    Cursor& operator++() {
      advance();
      return *this;
    }
    bool operator!=(End) const { return !done_; }

   private:
    void advance() { done_ = !it_->next(row_); }
    TupleIterator* it_;
    std::vector<Tensor> row_;
    bool done_ = false;
  };
  Cursor begin() { return Cursor(this); }
  End end() { return {}; }

 private:
  friend class Dataset;
  friend class DictIterator;
  TupleIterator(std::shared_ptr<detail::Pipeline> pipeline, std::vector<int> column_map,
                std::vector<std::string> names);
  std::shared_ptr<detail::Pipeline> pipeline_;
  std::vector<int> column_map_;  // output column -> pipeline column
  std::vector<std::string> names_;
};

class DictIterator {
 public:
  bool next(std::map<std::string, Tensor>& row);
  PipelineStats stats() const { return tuple_.stats(); }
  void stop() { tuple_.stop(); }
  int64_t epoch() const { return tuple_.epoch(); }

 private:
  friend class Dataset;
  explicit DictIterator(TupleIterator tuple) : tuple_(std::move(tuple)) {}
  TupleIterator tuple_;
  std::vector<Tensor> scratch_;
};

// ---- Sources ------------------------------------------------------------------------------

struct GeneratorOptions {
  int num_parallel_workers = 1;      // >1 calls a random-access generator from several threads
  std::optional<bool> shuffle = {};  // unset: true for random-access generators
  int64_t num_samples = 0;
  int num_shards = 0;
  int shard_id = 0;
};

// Random-access generator: `get_item(i)` returns row i of `length`. With num_parallel_workers > 1
// it is called from several threads at once and must be thread-safe.
class GeneratorDataset : public Dataset {
 public:
  using GetItem = std::function<std::vector<Tensor>(int64_t index)>;
  using Next = std::function<bool(std::vector<Tensor>& row)>;
  using MakeIterable = std::function<Next()>;

  GeneratorDataset(GetItem get_item, int64_t length, std::vector<std::string> column_names,
                   GeneratorOptions options = {});
  // Iterable generator: `make_iterable()` is called at each epoch's start and returns a `next`
  // function that fills a row and returns false at the end (or never, for an endless stream).
  // Sequential: no shuffle, no sharding, one thread.
  GeneratorDataset(MakeIterable make_iterable, std::vector<std::string> column_names,
                   GeneratorOptions options = {});
};

struct MnistOptions {
  std::string usage = "all";  // "train", "test" or "all" (train then test)
  int num_parallel_workers = 0;
  std::optional<bool> shuffle = {};
  int64_t num_samples = 0;
  int num_shards = 0;
  int shard_id = 0;
};

// IDX files (gzipped or not) loaded once into memory; rows are views. Columns: "image" u8
// [28, 28, 1] and "label" i32 []. Looks for train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte in `dataset_dir`.
class MnistDataset : public Dataset {
 public:
  explicit MnistDataset(std::string dataset_dir, MnistOptions options = {});

 protected:
  MnistDataset(std::string dataset_dir, MnistOptions options, const char* name);
};

// The Fashion-MNIST files; an empty `dataset_dir` means Debian's copy in
// /usr/share/datasets/fashion-mnist (package dataset-fashion-mnist).
class FashionMnistDataset : public MnistDataset {
 public:
  explicit FashionMnistDataset(std::string dataset_dir = "", MnistOptions options = {});
};
inline constexpr const char* kDebianFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct ImageFolderOptions {
  bool decode = false;  // false: "image" holds the file's bytes (u8 [n]); true: u8 HWC
  // With decode: 0 gives the folder's channels (image_folder_channels()); 1 or 3 forces them.
  int channels = 0;
  std::vector<std::string> extensions = {};        // default .jpg .jpeg .png (any case)
  std::map<std::string, int> class_indexing = {};  // default: sorted folder names -> 0, 1, ...
  int num_parallel_workers = 0;
  std::optional<bool> shuffle = {};
  int64_t num_samples = 0;
  int num_shards = 0;
  int shard_id = 0;
};

// One subfolder per class. Columns: "image", "label" (i32 []).
class ImageFolderDataset : public Dataset {
 public:
  explicit ImageFolderDataset(std::string dataset_dir, ImageFolderOptions options = {});
};

// Kiln's one rule for the channels of a set of images: 1 when every image is grayscale (PNG gray
// or gray + alpha, 1-component JPEG), else 3; alpha is dropped. ImageFolderDataset's decode,
// `kiln data bench --decode` and `kiln train --data` follow it. Reads each file's header (the
// folders and extensions of `options`); FileError naming a file that is not an image.
int64_t image_folder_channels(const std::string& dataset_dir,
                              const ImageFolderOptions& options = {});

// In-memory arrays sliced along their first dimension (all the same length). Rows are views.
class NumpySlicesDataset : public Dataset {
 public:
  NumpySlicesDataset(std::vector<Tensor> data, std::vector<std::string> column_names,
                     SourceOptions options = {});
};

}  // namespace kiln::data
