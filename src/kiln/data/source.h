#pragma once
// The source interface: what a data set must provide so the pipeline engine can read it.
//
// A source only knows how to read rows. Sampling (shuffle, num_samples, sharding), parallel
// reading, ordering, epochs and error reporting are the engine's job, so every source gets them
// the same way. To add a source (record files, say):
//
//   class RecordSource : public kiln::data::Source {
//     std::string name() const override { return "RecordDataset"; }
//     std::vector<std::string> column_names() const override { return {"image", "label"}; }
//     int64_t num_rows() const override { return rows_; }
//     std::unique_ptr<SourceReader> make_reader() const override;   // one per worker thread
//     std::string describe(int64_t index) const override;          // "record 17 of a.kiln"
//   };
//   Dataset RecordDataset(files, opts) {
//     return Dataset::from_source(std::make_shared<RecordSource>(files), opts);
//   }
//
// This interface is stable: other folders (record/) implement it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::data {

class Source;

// One row in flight: its columns, and where it came from (so an error can name the file).
struct Row {
  std::vector<Tensor> columns;
  const Source* source = nullptr;  // null for rows a stage made (a batch)
  int64_t index = -1;              // row index in `source`; the batch number for a batch
};

// "file /data/cat/1.jpg", "row 17 of MnistDataset", "batch 3".
std::string describe_row(const Row& row);

// Reads a random-access source. The engine makes one reader per worker thread, so a reader may
// keep per-thread state (an open file, a scratch buffer) without locking. Readers of the same
// source run concurrently.
class SourceReader {
 public:
  virtual ~SourceReader() = default;
  // Fills `columns` (in Source::column_names() order) with row `index`, 0 <= index < num_rows().
  // `columns` arrives empty. Throw kiln::Error/FileError on a bad row; the engine adds the stage
  // name and describe(index) to the message, stops the pipeline and rethrows at the consumer.
  virtual void read(int64_t index, std::vector<Tensor>& columns) = 0;
  // True when read_many() is cheaper than one read() per row (one call into an interpreter, one
  // round trip to a worker process); the engine then reads each block of rows at once.
  virtual bool reads_many() const { return false; }
  // Fills rows[k].columns (each arrives empty) with row indices[k]. Throw as read() does, naming
  // the row that failed in the message (the engine names the block's rows).
  virtual void read_many(const std::vector<int64_t>& indices, std::vector<Row>& rows);
  // With reads_many(): the engine announces each block before it reads it, up to one block
  // ahead (will_read(A), will_read(B), read_many(A), will_read(C), read_many(B), ...), so a
  // reader backed by another process works on B while this thread takes A. Only a hint: the
  // default ignores it.
  virtual void will_read(const std::vector<int64_t>& indices) { (void)indices; }
};

// Reads an iterable source front to back. The engine makes one per epoch, in one thread.
class SequentialReader {
 public:
  virtual ~SequentialReader() = default;
  // Fills `columns` (arrives empty) with the next row; returns false at the end of the epoch.
  virtual bool next(std::vector<Tensor>& columns) = 0;
};

class Source {
 public:
  virtual ~Source() = default;
  // Names the source stage in statistics and error messages ("ImageFolderDataset").
  virtual std::string name() const = 0;
  virtual std::vector<std::string> column_names() const = 0;
  // Rows in the source; -1 when it can only be iterated (length unknown).
  virtual int64_t num_rows() const = 0;
  // Random-access sources get shuffling, sharding and parallel reading from the engine.
  virtual bool random_access() const { return num_rows() >= 0; }
  // For random-access sources. The default throws.
  virtual std::unique_ptr<SourceReader> make_reader() const;
  // For iterable sources. The default reads indices 0, 1, ... through make_reader().
  virtual std::unique_ptr<SequentialReader> make_sequential_reader() const;
  // What an error message calls row `index` ("file /x/1.jpg"). Default: "row {index} of {name}".
  virtual std::string describe(int64_t index) const;
  // Reader threads used when SourceOptions::num_parallel_workers is 0.
  virtual int default_workers() const { return 1; }
  // True for sources whose rows are equal slices of arrays in memory (ArraySource below): a batch
  // that reads such a source directly then copies its rows straight out of the arrays
  // (gather_rows), and the source's thread hands it row numbers, not rows. A row of its own is
  // a few small allocations made on one thread and freed on another; for Fashion-MNIST that
  // traffic cost 2.3 µs a row, CPU time that training on every core pays.
  virtual bool gathers_rows() const { return false; }
  // With gathers_rows(): fills `columns` (arrives empty) with one contiguous tensor per column,
  // [indices.size(), ...the row's shape], row k equal to what read() gives for indices[k].
  // Called from several threads at once. The default throws.
  virtual void gather_rows(const std::vector<int64_t>& indices, std::vector<Tensor>& columns) const;
};

// One column of a source whose row i is `array` seen with `row_shape` and `row_strides` from
// element `first + i * step` of its storage: what read() makes a view of and gather_rows() copies.
struct ArrayRows {
  Tensor array;
  Shape row_shape;
  Strides row_strides;
  int64_t first = 0, step = 0;

  Tensor row(int64_t index) const;                           // a view, no copy
  Tensor gather(const std::vector<int64_t>& indices) const;  // a new contiguous batch
};

// A source whose every column is ArrayRows: its reader gives views, gather_rows() copies. The
// subclass fills `array_columns_`, one per column_names() entry, in its constructor.
class ArraySource : public Source {
 public:
  std::unique_ptr<SourceReader> make_reader() const override;
  bool gathers_rows() const override { return true; }
  void gather_rows(const std::vector<int64_t>& indices,
                   std::vector<Tensor>& columns) const override;

 protected:
  std::vector<ArrayRows> array_columns_;
};

// MindSpore's keyword arguments common to every source.
struct SourceOptions {
  int num_parallel_workers = 0;      // reader threads; 0: the source's default
  std::optional<bool> shuffle = {};  // unset: shuffle random-access sources (MindSpore's default)
  int64_t num_samples = 0;           // rows per epoch (after sharding); 0: all
  int num_shards = 0;                // 0 or 1: no sharding
  int shard_id = 0;
};

}  // namespace kiln::data
