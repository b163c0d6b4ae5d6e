#include "kiln/record/shard_reader.h"

#include <algorithm>

#include "kiln/record/crc32c.h"
#include "kiln/record/detail/record_codec.h"

namespace kiln::record {

std::shared_ptr<ShardReader> ShardReader::open(const std::string& path, Access access) {
  auto map = MappedFile::open(path, access);
  auto reader = std::make_shared<ShardReader>(path, map->data(), map->size(), map);
  reader->map_ = map;
  return reader;
}

ShardReader::ShardReader(std::string name, const uint8_t* data, size_t size,
                         std::shared_ptr<const void> keeper)
    : name_(std::move(name)), data_(data), size_(size), keeper_(std::move(keeper)) {
  parse();
}

void ShardReader::advise(Access access) const {
  if (map_) map_->advise(access);
}

void ShardReader::parse() {
  header_ = decode_header(data_, size_, name_);
  const Header& h = header_;
  auto check_crc = [&](const SectionRef& s, const char* what) {
    uint32_t actual = crc32c(data_ + s.offset, s.length);
    if (actual != s.crc)
      fail_at(name_, s.offset,
              detail::concat("the ", what, " section's checksum does not match (stored 0x",
                             std::hex, s.crc, ", computed 0x", actual, "): it is damaged"));
  };
  check_crc(h.meta, "meta");
  meta_ = decode_meta(data_ + h.meta.offset, h.meta.length, h.meta.offset, name_);
  if (meta_.schema.size() != h.meta.count)
    fail_at(name_, h.meta.offset,
            detail::concat("the header says ", h.meta.count, " fields, the schema has ",
                           meta_.schema.size()));
  if (meta_.shard_names.size() != h.shard_count)
    fail_at(name_, h.meta.offset,
            detail::concat("the header says ", h.shard_count, " shards, the shard list names ",
                           meta_.shard_names.size()));
  check_crc(h.rows, "row table");
  check_crc(h.fields, "field index");

  // The field index section: one table per indexed field, each with an entry for every row.
  index_entries_at_.assign(meta_.schema.size(), 0);
  size_t indexed = 0;
  for (const Field& f : meta_.schema.fields()) indexed += f.indexed;
  if (indexed != h.fields.count)
    fail_at(name_, h.fields.offset,
            detail::concat("the schema marks ", indexed, " fields as indexed, the header lists ",
                           h.fields.count, " field indexes"));
  Cursor c(data_ + h.fields.offset, h.fields.length, h.fields.offset, name_);
  for (uint32_t i = 0; i < h.fields.count; ++i) {
    uint64_t at = c.file_offset();
    uint32_t field = c.u32("a field index's field number");
    uint32_t reserved = c.u32("a reserved word");
    uint64_t count = c.u64("a field index's entry count");
    if (field >= meta_.schema.size() || !meta_.schema[field].indexed)
      fail_at(name_, at,
              detail::concat("field index for field ", field, ", which is not an indexed field"));
    if (index_entries_at_[field] != 0)
      fail_at(name_, at,
              detail::concat("a second index for field '", meta_.schema[field].name, "'"));
    if (reserved != 0) fail_at(name_, at + 4, "reserved word is not zero");
    if (count != h.row_count)
      fail_at(name_, at + 8,
              detail::concat("the index of field '", meta_.schema[field].name, "' has ", count,
                             " entries for ", h.row_count, " rows"));
    index_entries_at_[field] = c.file_offset();
    c.bytes(count * kFieldIndexEntrySize, "field index entries");  // count <= 2^32: no overflow
  }
  if (c.remaining() != 0)
    fail_at(name_, c.file_offset(),
            detail::concat(c.remaining(), " unexpected bytes at the end of the field index"));
}

RowEntry ShardReader::entry(uint64_t local_row) const {
  const Header& h = header_;
  if (local_row >= h.row_count)
    throw Error(detail::concat(name_, ": row ", local_row, " is out of range (the shard has ",
                               h.row_count, " rows)"));
  uint64_t entry_at = h.rows.offset + local_row * kRowEntrySize;
  RowEntry e = decode_row_entry(data_ + entry_at);
  uint64_t first = h.data.offset + kPageHeaderSize;
  uint64_t end = h.data.offset + h.data.length;
  if (e.offset < first || e.offset > end || end - e.offset < kRecordHeaderSize ||
      e.length > end - e.offset - kRecordHeaderSize)
    fail_at(name_, entry_at,
            detail::concat("the row table entry of row ", local_row, " points at [", e.offset,
                           ", +", uint64_t(e.length) + kRecordHeaderSize,
                           "), outside the data section [", h.data.offset, ", ", end, ")"));
  return e;
}

std::span<const uint8_t> ShardReader::payload(uint64_t local_row, bool check_crc) const {
  RowEntry e = entry(local_row);
  uint32_t length, crc;
  std::memcpy(&length, data_ + e.offset, 4);
  std::memcpy(&crc, data_ + e.offset + 4, 4);
  if (length != e.length || crc != e.crc)
    fail_at(name_, e.offset,
            detail::concat("the record header of row ", local_row, " (length ", length, ", crc 0x",
                           std::hex, crc, ") disagrees with the row table (length ", std::dec,
                           e.length, ", crc 0x", std::hex, e.crc, ")"));
  const uint8_t* p = data_ + e.offset + kRecordHeaderSize;
  if (check_crc) {
    uint32_t actual = crc32c(p, e.length);
    if (actual != e.crc)
      fail_at(name_, e.offset + kRecordHeaderSize,
              detail::concat("checksum mismatch in row ", local_row, " (stored 0x", std::hex, e.crc,
                             ", computed 0x", actual, "): the record is damaged"));
  }
  return {p, e.length};
}

void ShardReader::read(uint64_t local_row, RowView& out, bool check_crc) const {
  auto p = payload(local_row, check_crc);
  decode_row(meta_.schema, p, uint64_t(p.data() - data_), name_, out);
}

std::span<const uint8_t> ShardReader::field_index(int field) const {
  if (field < 0 || size_t(field) >= index_entries_at_.size() || index_entries_at_[field] == 0)
    throw Error(detail::concat(name_, ": field ", field, " is not indexed"));
  return {data_ + index_entries_at_[field], size_t(header_.row_count * kFieldIndexEntrySize)};
}

std::vector<uint64_t> ShardReader::rows_with_key(int field, uint64_t key) const {
  auto table = field_index(field);
  size_t n = table.size() / kFieldIndexEntrySize;
  auto key_at = [&](size_t i) {
    uint64_t k;
    std::memcpy(&k, table.data() + i * kFieldIndexEntrySize, 8);
    return k;
  };
  // lower bound by binary search; a damaged (unsorted) table gives wrong rows, never a crash.
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (key_at(mid) < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  std::vector<uint64_t> rows;
  for (size_t i = lo; i < n && key_at(i) == key; ++i) {
    uint64_t row;
    std::memcpy(&row, table.data() + i * kFieldIndexEntrySize + 8, 8);
    if (row >= header_.row_count)
      fail_at(name_, index_entries_at_[field] + i * kFieldIndexEntrySize + 8,
              detail::concat("field index entry points at row ", row, " of ", header_.row_count));
    rows.push_back(row);
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace kiln::record
