#pragma once
// A full integrity check of record files: every header, section checksum, page, record checksum,
// row-table entry and field-index entry, and the consistency of a shard set.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/record/shard_reader.h"

namespace kiln::record {

struct VerifyReport {
  std::vector<std::string> files;     // shard files looked at
  std::vector<std::string> problems;  // each names the file and byte offset; empty when whole
  uint64_t problem_count = 0;         // may exceed problems.size() (the list is capped)
  uint64_t rows_checked = 0;
  uint64_t pages_checked = 0;
  bool ok() const { return problem_count == 0; }
};

// Checks one parsed shard down to every byte of its data section (padding must be zero, so any
// flipped byte anywhere in the file is found).
void verify_shard(const ShardReader& shard, VerifyReport& report, size_t max_problems = 50);

// Checks `file`; with `whole_set`, also every sibling shard its header names and that the shards
// form one set (same commit, same schema). Never throws for damaged files: problems are listed.
VerifyReport verify_records(const std::string& file, bool whole_set = true,
                            size_t max_problems = 50);

}  // namespace kiln::record
