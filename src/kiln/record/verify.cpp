#include "kiln/record/verify.h"

#include <sys/stat.h>

#include <algorithm>

#include "kiln/record/crc32c.h"
#include "kiln/record/detail/record_codec.h"
#include "kiln/record/record_reader.h"

namespace kiln::record {
namespace {

class ProblemList {
 public:
  ProblemList(VerifyReport& r, size_t max) : report_(r), max_(max) {}
  void add(std::string message) {
    ++report_.problem_count;
    if (report_.problems.size() < max_) report_.problems.push_back(std::move(message));
  }
  void add_at(const std::string& file, uint64_t offset, const std::string& message) {
    add(detail::concat(file, ": byte ", offset, ": ", message));
  }
  bool full() const { return report_.problems.size() >= max_; }

 private:
  VerifyReport& report_;
  size_t max_;
};

// Offset of the first non-zero byte in [begin, end), or `end`.
uint64_t first_nonzero(const uint8_t* base, uint64_t begin, uint64_t end) {
  for (uint64_t i = begin; i < end; ++i)
    if (base[i] != 0) return i;
  return end;
}

}  // namespace

void verify_shard(const ShardReader& shard, VerifyReport& report, size_t max_problems) {
  ProblemList problems(report, max_problems);
  const Header& h = shard.header();
  const Schema& schema = shard.schema();
  const std::string& file = shard.path();
  const uint8_t* base = shard.bytes();

  // Gaps that must be zero: the header's reserved bytes and the padding before the data.
  if (uint64_t at = first_nonzero(base, 160, kHeaderCrcOffset); at != kHeaderCrcOffset)
    problems.add_at(file, at, "reserved header bytes are not zero");
  uint64_t meta_end = h.meta.offset + h.meta.length;
  if (uint64_t at = first_nonzero(base, meta_end, h.data.offset); at != h.data.offset)
    problems.add_at(file, at, "padding before the data section is not zero");
  if (h.fields.offset + h.fields.length != h.file_size ||
      h.rows.offset != h.data.offset + h.data.length ||
      h.fields.offset != h.rows.offset + h.rows.length || h.meta.offset != kHeaderSize)
    problems.add_at(file, 64, "the sections are not packed in order (gaps between them)");

  // 1. Every row through the row table: bounds, record header, checksum, schema.
  std::vector<int> indexed_fields;
  for (size_t i = 0; i < schema.size(); ++i)
    if (schema[i].indexed) indexed_fields.push_back(int(i));
  std::vector<std::vector<uint64_t>> keys(indexed_fields.size());
  for (auto& k : keys) k.assign(size_t(h.row_count), 0);
  std::vector<uint8_t> row_ok(size_t(h.row_count), 0);
  RowView view;
  for (uint64_t r = 0; r < h.row_count; ++r) {
    try {
      shard.read(r, view, true);
      for (size_t k = 0; k < indexed_fields.size(); ++k)
        keys[k][r] = index_key(view[size_t(indexed_fields[k])]);
      row_ok[r] = 1;
    } catch (const Error& e) {
      problems.add(e.what());
    }
    ++report.rows_checked;
  }

  // 2. The pages: headers, records laid out back to back as the row table says, zero padding.
  uint64_t pos = h.data.offset, end = h.data.offset + h.data.length, expect_row = 0;
  bool pages_ok = true;
  for (uint32_t p = 0; p < h.data.count && pages_ok; ++p) {
    try {
      if (end - pos < kPageHeaderSize) fail_at(file, pos, "a page header runs past the data");
      PageHeader ph = decode_page_header(base + pos, pos, file);
      uint64_t bytes = uint64_t(ph.span) * h.page_size;
      if (ph.span == 0 || ph.span > (end - pos) / h.page_size)
        fail_at(file, pos + 20,
                detail::concat("page spans ", ph.span, " page units but only ",
                               (end - pos) / h.page_size, " remain"));
      if (ph.used_bytes < kPageHeaderSize || ph.used_bytes > bytes)
        fail_at(file, pos + 4,
                detail::concat("page uses ", ph.used_bytes, " of its ", bytes, " bytes"));
      if (ph.first_row != expect_row || ph.row_count == 0 ||
          ph.row_count > h.row_count - expect_row || (ph.span > 1 && ph.row_count != 1))
        fail_at(file, pos + 8,
                detail::concat("page holds rows [", ph.first_row, ", +", ph.row_count,
                               "), expected rows from ", expect_row));
      uint64_t at = pos + kPageHeaderSize;
      for (uint64_t r = ph.first_row; r < ph.first_row + ph.row_count; ++r) {
        RowEntry e = decode_row_entry(base + h.rows.offset + r * kRowEntrySize);
        if (e.offset != at)
          fail_at(file, h.rows.offset + r * kRowEntrySize,
                  detail::concat("the row table puts row ", r, " at ", e.offset,
                                 ", but in its page it starts at ", at));
        at += kRecordHeaderSize + uint64_t(e.length);
        if (at > pos + ph.used_bytes)
          fail_at(file, pos + 4, detail::concat("row ", r, " runs past the page's used bytes"));
      }
      if (at != pos + ph.used_bytes)
        fail_at(file, pos + 4,
                detail::concat("the page says ", ph.used_bytes,
                               " bytes are used but its records end at ", at - pos));
      if (uint64_t z = first_nonzero(base, pos + ph.used_bytes, pos + bytes); z != pos + bytes)
        fail_at(file, z, "page padding is not zero");
      expect_row += ph.row_count;
      pos += bytes;
      ++report.pages_checked;
    } catch (const Error& e) {
      problems.add(e.what());
      pages_ok = false;  // without a trustworthy page header the walk cannot go on
    }
  }
  if (pages_ok && (pos != end || expect_row != h.row_count))
    problems.add_at(file, h.data.offset,
                    detail::concat("the pages hold ", expect_row, " rows in ", pos - h.data.offset,
                                   " bytes; the shard has ", h.row_count, " rows in ",
                                   h.data.length, " bytes"));

  // 3. Field indexes: sorted, one entry per row, keys equal to the rows' values.
  for (size_t k = 0; k < indexed_fields.size(); ++k) {
    const Field& f = schema[size_t(indexed_fields[k])];
    auto table = shard.field_index(indexed_fields[k]);
    uint64_t table_at = uint64_t(table.data() - base);
    std::vector<uint8_t> seen(size_t(h.row_count), 0);
    uint64_t prev_key = 0, prev_row = 0;
    for (uint64_t i = 0; i < h.row_count && !problems.full(); ++i) {
      uint64_t key, row;
      std::memcpy(&key, table.data() + i * kFieldIndexEntrySize, 8);
      std::memcpy(&row, table.data() + i * kFieldIndexEntrySize + 8, 8);
      uint64_t at = table_at + i * kFieldIndexEntrySize;
      if (i > 0 && (key < prev_key || (key == prev_key && row <= prev_row)))
        problems.add_at(file, at,
                        detail::concat("index of field '", f.name, "' is not sorted at entry ", i));
      if (row >= h.row_count) {
        problems.add_at(file, at + 8,
                        detail::concat("index of field '", f.name, "' entry ", i, " points at row ",
                                       row, " of ", h.row_count));
      } else {
        if (seen[row]++)
          problems.add_at(
              file, at + 8,
              detail::concat("index of field '", f.name, "' lists row ", row, " twice"));
        if (row_ok[row] && keys[k][row] != key)
          problems.add_at(
              file, at,
              detail::concat("index of field '", f.name, "' has key 0x", std::hex, key, " for row ",
                             std::dec, row, ", whose value gives 0x", std::hex, keys[k][row]));
      }
      prev_key = key;
      prev_row = row;
    }
  }
}

VerifyReport verify_records(const std::string& file, bool whole_set, size_t max_problems) {
  VerifyReport report;
  ProblemList problems(report, max_problems);
  std::shared_ptr<ShardReader> first;
  report.files.push_back(file);
  try {
    first = ShardReader::open(file);
  } catch (const Error& e) {
    problems.add(e.what());
    return report;
  }
  verify_shard(*first, report, max_problems);
  if (!whole_set || first->header().shard_count == 1) return report;

  bool all_present = true;
  for (const std::string& p : RecordReader::sibling_paths(*first)) {
    if (file_name_of(p) == file_name_of(file)) continue;
    report.files.push_back(p);
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      problems.add(detail::concat(p, ": missing (shard of the set that ", file, " belongs to)"));
      all_present = false;
      continue;
    }
    try {
      auto shard = ShardReader::open(p);
      verify_shard(*shard, report, max_problems);
    } catch (const Error& e) {
      problems.add(e.what());
      all_present = false;
    }
  }
  if (all_present) {
    try {
      RecordReader set(file);
    } catch (const Error& e) {
      problems.add(e.what());
    }
  }
  return report;
}

}  // namespace kiln::record
