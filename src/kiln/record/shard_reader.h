#pragma once
// One record shard file, parsed and checked. Opening checks the header, the schema and the CRCs
// of the row table and the field indexes; reading a row checks that its row-table entry points
// inside the data section, that the record header agrees with it and the record's CRC-32C.
// Nothing in the file is trusted: every failure is a FileError with the file and byte offset.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/record/format.h"
#include "kiln/record/mapped_file.h"
#include "kiln/record/value.h"

namespace kiln::record {

class ShardReader {
 public:
  static std::shared_ptr<ShardReader> open(const std::string& path, Access access = Access::normal);
  // Parses a file image already in memory (tests, the fuzzer). `keeper` keeps `data` alive;
  // `name` stands for the file in error messages.
  ShardReader(std::string name, const uint8_t* data, size_t size,
              std::shared_ptr<const void> keeper);

  const std::string& path() const { return name_; }
  const Header& header() const { return header_; }
  const Meta& meta() const { return meta_; }
  const Schema& schema() const { return meta_.schema; }
  uint64_t num_rows() const { return header_.row_count; }
  const uint8_t* bytes() const { return data_; }
  size_t size() const { return size_; }
  // Keeps the file's bytes alive (for zero-copy views handed out to tensors).
  const std::shared_ptr<const void>& keeper() const { return keeper_; }
  void advise(Access access) const;

  // The row-table entry of a local row, checked to lie inside the data section.
  RowEntry entry(uint64_t local_row) const;
  // The payload of a local row; `check_crc` recomputes its CRC-32C.
  std::span<const uint8_t> payload(uint64_t local_row, bool check_crc = true) const;
  void read(uint64_t local_row, RowView& out, bool check_crc = true) const;

  // Local rows whose indexed field `field` has index key `key` (string keys are hashes: the
  // caller compares the strings), ascending. Throws Error when the field is not indexed.
  std::vector<uint64_t> rows_with_key(int field, uint64_t key) const;
  // The raw sorted (key, local row) table of an indexed field (for verify).
  std::span<const uint8_t> field_index(int field) const;

 private:
  void parse();

  std::string name_;
  const uint8_t* data_;
  size_t size_;
  std::shared_ptr<const void> keeper_;
  std::shared_ptr<MappedFile> map_;
  Header header_;
  Meta meta_;
  // Per schema field: offset of its entries in the fields section, or 0 when not indexed.
  std::vector<uint64_t> index_entries_at_;
};

}  // namespace kiln::record
