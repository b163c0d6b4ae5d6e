#pragma once
// Writes a record set: `shard_num` files, rows dealt round-robin over them.
//
//   FileWriter writer("train.krec", 4);            // train.krec0 .. train.krec3
//   writer.add_schema({Field::scalar("label", FieldType::int32),
//                      Field::scalar("image", FieldType::bytes)});
//   writer.add_index({"label"});
//   writer.write_raw_data(rows);                    // as often as needed
//   writer.commit();
//
// Atomicity: rows go to hidden temporary files next to the final ones
// (".<name>.kiln-tmp-<pid>-<random>"); commit() completes them, fsyncs them and renames them into
// place. Until commit() returns no file exists under a final name that was not there before, and
// a crash or kill leaves the previous files untouched (the next writer for the same path removes
// the orphaned temporaries of dead processes). Every shard of one commit carries the same random
// set id, so a set mixed from two commits (a crash between two renames of an overwrite) is
// refused by the reader instead of read.
//
// Threads: every method takes an internal lock, so several threads may call write_raw_data at
// once; each call's rows stay together, in the order the calls take the lock. Calls after
// commit() throw.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/record/format.h"
#include "kiln/record/value.h"

namespace kiln::record {

struct WriterOptions {
  bool overwrite = false;                 // replace an existing set under the same name
  uint32_t page_size = kDefaultPageSize;  // power of two, 4 KiB .. 1 GiB
};

class FileWriter {
 public:
  FileWriter(std::string path, int shard_num = 1, WriterOptions options = {});
  ~FileWriter();  // without commit(): removes the temporary files
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void add_schema(std::vector<Field> fields);
  // Marks scalar or string fields as indexed, for RecordReader::find. Before the first write.
  void add_index(const std::vector<std::string>& fields);
  void write_raw_data(const std::vector<Row>& rows);
  void commit();

  uint64_t rows_written() const;
  const std::vector<std::string>& paths() const { return final_paths_; }
  // "x" for one shard; "x0", "x1", ... for several (the MindRecord convention).
  static std::vector<std::string> shard_paths(const std::string& path, int shard_num);

 private:
  struct Shard;
  void begin_locked();
  void write_row_locked(const Row& row);
  void abandon_locked() noexcept;

  mutable std::mutex mutex_;
  std::string path_;
  WriterOptions options_;
  std::vector<std::string> final_paths_;
  Schema schema_;
  bool has_schema_ = false;
  bool begun_ = false;
  bool committed_ = false;
  bool failed_ = false;
  uint64_t dataset_id_ = 0;
  uint64_t rows_ = 0;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<uint8_t> payload_;  // scratch, reused for every row
  std::vector<uint64_t> keys_;    // scratch
};

}  // namespace kiln::record
