#pragma once
// A set of record shards read as one table of rows.
//
// Row numbering: the writer deals rows round-robin (global row g -> shard g % N, local row
// g / N), so with the K shards that are open, sorted by shard index, reader row r is local row
// r / K of the (r % K)-th open shard. With every shard open that is the order the rows were
// written in; with a subset it is the same interleaving restricted to the subset.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/record/shard_reader.h"

namespace kiln::record {

struct ReaderOptions {
  bool verify_checksums = true;  // recompute each record's CRC-32C on every read
  Access access = Access::normal;
};

class RecordReader {
 public:
  // One file: opens it and every sibling shard its header names (all must be present, else a
  // FileError lists the missing ones).
  explicit RecordReader(const std::string& file, ReaderOptions options = {});
  // Exactly these files, which must be shards of one record set (same commit), any order.
  explicit RecordReader(const std::vector<std::string>& files, ReaderOptions options = {});

  const Schema& schema() const { return shards_.front()->schema(); }
  uint64_t num_rows() const { return num_rows_; }
  size_t num_shards() const { return shards_.size(); }
  const ShardReader& shard(size_t i) const { return *shards_[i]; }
  const std::shared_ptr<ShardReader>& shard_ptr(size_t i) const { return shards_[i]; }
  const ReaderOptions& options() const { return options_; }

  // Which open shard (position in shards()) and local row hold reader row `row`.
  struct Location {
    size_t shard;
    uint64_t local_row;
  };
  Location locate(uint64_t row) const;
  uint64_t row_of(size_t shard, uint64_t local_row) const {
    return local_row * shards_.size() + shard;
  }

  // O(1): one row-table lookup, a CRC check and a bounds-checked decode.
  void read(uint64_t row, RowView& out) const;
  RowView read(uint64_t row) const;

  // Reader rows whose indexed field equals `value` (ascending). Throws Error when the field is
  // not indexed.
  std::vector<uint64_t> find(std::string_view field, const Value& value) const;

  // Paths of every shard the first file's header names, and which of them do not exist.
  static std::vector<std::string> sibling_paths(const ShardReader& shard);

 private:
  void check_set();

  ReaderOptions options_;
  std::vector<std::shared_ptr<ShardReader>> shards_;  // sorted by shard index
  uint64_t num_rows_ = 0;
};

// The directory part of a path ("" for a bare name) and the file name part.
std::string directory_of(const std::string& path);
std::string file_name_of(const std::string& path);

}  // namespace kiln::record
