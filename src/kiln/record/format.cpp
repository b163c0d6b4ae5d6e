#include "kiln/record/format.h"

#include <cmath>
#include <limits>
#include <set>

#include "kiln/record/crc32c.h"

namespace kiln::record {
namespace {

template <class T>
void store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

constexpr size_t kSectionTableOffset = 64;
constexpr size_t kSectionRefSize = 24;
constexpr const char* kSectionNames[4] = {"meta", "data", "row table", "field index"};

bool fits(uint64_t offset, uint64_t length, uint64_t limit) {
  return length <= limit && offset <= limit - length;
}

void check_name(const std::string& name, const std::string& file, uint64_t offset,
                const char* what) {
  if (name.empty() || name.size() > kMaxFieldNameBytes)
    fail_at(file, offset,
            detail::concat(what, " is ", name.size(), " bytes long (1..255 allowed)"));
  if (name.find('\0') != std::string::npos)
    fail_at(file, offset, detail::concat(what, " has a NUL"));
}

}  // namespace

void fail_at(const std::string& file, uint64_t offset, const std::string& message) {
  throw FileError(detail::concat(file, ": byte ", offset, ": ", message));
}

std::array<uint8_t, kHeaderSize> encode_header(const Header& h) {
  std::array<uint8_t, kHeaderSize> b{};
  std::memcpy(b.data(), kMagic, 8);
  store<uint32_t>(&b[8], h.version);
  store<uint32_t>(&b[12], uint32_t(kHeaderSize));
  store<uint64_t>(&b[16], h.dataset_id);
  store<uint32_t>(&b[24], h.shard_index);
  store<uint32_t>(&b[28], h.shard_count);
  store<uint64_t>(&b[32], h.total_rows);
  store<uint64_t>(&b[40], h.row_count);
  store<uint32_t>(&b[48], h.page_size);
  store<uint32_t>(&b[52], h.flags);
  store<uint64_t>(&b[56], h.file_size);
  const SectionRef* sections[4] = {&h.meta, &h.data, &h.rows, &h.fields};
  for (int i = 0; i < 4; ++i) {
    uint8_t* p = &b[kSectionTableOffset + kSectionRefSize * i];
    store<uint64_t>(p, sections[i]->offset);
    store<uint64_t>(p + 8, sections[i]->length);
    store<uint32_t>(p + 16, sections[i]->count);
    store<uint32_t>(p + 20, sections[i]->crc);
  }
  store<uint32_t>(&b[kHeaderCrcOffset], crc32c(b.data(), kHeaderCrcOffset));
  return b;
}

Header decode_header(const uint8_t* d, size_t file_size, const std::string& file) {
  if (file_size < kHeaderSize)
    fail_at(file, 0,
            detail::concat("the file is ", file_size, " bytes, shorter than the ", kHeaderSize,
                           "-byte header (truncated?)"));
  if (std::memcmp(d, kMagic, 8) != 0)
    fail_at(file, 0, "not a Kiln record file (the first 8 bytes are not \"KILNREC\\0\")");
  Header h;
  h.version = load<uint32_t>(d + 8);
  if (h.version != kFormatVersion)
    fail_at(file, 8,
            detail::concat("record format version ", h.version,
                           " is not supported (this reader reads version ", kFormatVersion, ")"));
  uint32_t header_size = load<uint32_t>(d + 12);
  if (header_size != kHeaderSize)
    fail_at(file, 12, detail::concat("header size ", header_size, ", expected ", kHeaderSize));
  uint32_t stored_crc = load<uint32_t>(d + kHeaderCrcOffset);
  uint32_t actual_crc = crc32c(d, kHeaderCrcOffset);
  if (stored_crc != actual_crc)
    fail_at(file, kHeaderCrcOffset,
            detail::concat("header checksum mismatch (stored 0x", std::hex, stored_crc,
                           ", computed 0x", actual_crc, "): the header is damaged"));
  h.dataset_id = load<uint64_t>(d + 16);
  h.shard_index = load<uint32_t>(d + 24);
  h.shard_count = load<uint32_t>(d + 28);
  h.total_rows = load<uint64_t>(d + 32);
  h.row_count = load<uint64_t>(d + 40);
  h.page_size = load<uint32_t>(d + 48);
  h.flags = load<uint32_t>(d + 52);
  h.file_size = load<uint64_t>(d + 56);
  SectionRef* sections[4] = {&h.meta, &h.data, &h.rows, &h.fields};
  for (int i = 0; i < 4; ++i) {
    const uint8_t* p = d + kSectionTableOffset + kSectionRefSize * i;
    sections[i]->offset = load<uint64_t>(p);
    sections[i]->length = load<uint64_t>(p + 8);
    sections[i]->count = load<uint32_t>(p + 16);
    sections[i]->crc = load<uint32_t>(p + 20);
  }

  if (h.file_size != file_size)
    fail_at(file, 56,
            detail::concat("the header says the file is ", h.file_size, " bytes but it is ",
                           file_size, (file_size < h.file_size ? " (truncated)" : " (extended)")));
  if (h.shard_count == 0 || h.shard_count > kMaxShards)
    fail_at(file, 28, detail::concat("shard count ", h.shard_count, " (1..", kMaxShards, ")"));
  if (h.shard_index >= h.shard_count)
    fail_at(file, 24,
            detail::concat("shard index ", h.shard_index, " is not below the shard count ",
                           h.shard_count));
  if (h.row_count != rows_in_shard(h.total_rows, h.shard_count, h.shard_index))
    fail_at(file, 40,
            detail::concat("shard ", h.shard_index, " of ", h.shard_count, " holds ", h.row_count,
                           " rows, but a set of ", h.total_rows, " rows puts ",
                           rows_in_shard(h.total_rows, h.shard_count, h.shard_index), " in it"));
  if (h.page_size < kMinPageSize || h.page_size > kMaxPageSize || !std::has_single_bit(h.page_size))
    fail_at(file, 48,
            detail::concat("page size ", h.page_size,
                           " is not a power of two between 4 KiB and 1 GiB"));
  if (h.flags != 0) fail_at(file, 52, detail::concat("unknown flags 0x", std::hex, h.flags));

  // Sections lie inside the file, in the order meta, data, rows, fields, without overlap.
  uint64_t previous_end = kHeaderSize;
  for (int i = 0; i < 4; ++i) {
    const SectionRef& s = *sections[i];
    uint64_t at = kSectionTableOffset + kSectionRefSize * i;
    if (!fits(s.offset, s.length, file_size))
      fail_at(file, at,
              detail::concat("the ", kSectionNames[i], " section [", s.offset, ", +", s.length,
                             ") runs past the end of the file (", file_size, " bytes)"));
    if (s.offset < previous_end)
      fail_at(file, at,
              detail::concat("the ", kSectionNames[i], " section starts at ", s.offset,
                             ", inside the previous section (which ends at ", previous_end, ")"));
    previous_end = s.offset + s.length;
  }
  uint64_t data_at = kSectionTableOffset + kSectionRefSize;
  if (h.data.offset % kDataAlignment != 0)
    fail_at(file, data_at,
            detail::concat("the data section starts at ", h.data.offset,
                           ", not on a 4096-byte boundary"));
  if (h.data.length % h.page_size != 0 || h.data.count > h.data.length / h.page_size)
    fail_at(file, data_at,
            detail::concat("the data section is ", h.data.length, " bytes with ", h.data.count,
                           " pages of ", h.page_size, " bytes"));
  uint64_t rows_at = kSectionTableOffset + 2 * kSectionRefSize;
  if (h.row_count > UINT32_MAX || h.rows.count != h.row_count ||
      h.rows.length != h.row_count * kRowEntrySize)
    fail_at(file, rows_at,
            detail::concat("the row table holds ", h.rows.count, " entries in ", h.rows.length,
                           " bytes, but the shard has ", h.row_count, " rows of ", kRowEntrySize,
                           " bytes"));
  if (h.row_count > 0 && h.data.count == 0)
    fail_at(file, data_at, detail::concat("the shard has ", h.row_count, " rows but no pages"));
  if (h.meta.count == 0 || h.meta.count > kMaxFields)
    fail_at(file, kSectionTableOffset, detail::concat("the schema has ", h.meta.count, " fields"));
  if (h.fields.count > h.meta.count)
    fail_at(file, kSectionTableOffset + 3 * kSectionRefSize,
            detail::concat(h.fields.count, " field indexes for ", h.meta.count, " fields"));
  return h;
}

std::vector<uint8_t> encode_meta(const Meta& meta) {
  std::vector<uint8_t> out;
  ByteSink sink(out);
  sink.put<uint32_t>(uint32_t(meta.schema.size()));
  for (const Field& f : meta.schema.fields()) {
    sink.put<uint16_t>(uint16_t(f.name.size()));
    sink.put_bytes(f.name.data(), f.name.size());
    sink.put<uint8_t>(uint8_t(f.type));
    sink.put<uint8_t>(uint8_t(f.elem));
    sink.put<uint8_t>(uint8_t(f.shape.size()));
    sink.put<uint8_t>(f.indexed ? 1 : 0);
    for (int64_t d : f.shape) sink.put<int64_t>(d);
  }
  sink.put<uint32_t>(uint32_t(meta.shard_names.size()));
  for (const std::string& name : meta.shard_names) {
    sink.put<uint16_t>(uint16_t(name.size()));
    sink.put_bytes(name.data(), name.size());
  }
  return out;
}

Meta decode_meta(const uint8_t* data, size_t size, uint64_t offset, const std::string& file) {
  Cursor c(data, size, offset, file);
  uint32_t field_count = c.u32("the field count");
  if (field_count == 0 || field_count > kMaxFields)
    fail_at(
        file, offset,
        detail::concat("the schema has ", field_count, " fields (1..", kMaxFields, " allowed)"));
  std::vector<Field> fields;
  fields.reserve(field_count);
  for (uint32_t i = 0; i < field_count; ++i) {
    uint64_t field_at = c.file_offset();
    Field f;
    uint16_t name_length = c.u16("a field name length");
    auto name = c.bytes(name_length, "a field name");
    f.name.assign(reinterpret_cast<const char*>(name.data()), name.size());
    check_name(f.name, file, field_at, "a field name");
    uint8_t type = c.u8("a field type");
    uint8_t elem = c.u8("an element type");
    uint8_t rank = c.u8("an array rank");
    uint8_t flags = c.u8("field flags");
    if (!is_valid_field_type(type))
      fail_at(file, c.file_offset() - 4,
              detail::concat("field '", f.name, "' has unknown type code ", int(type)));
    f.type = FieldType(type);
    if (f.type == FieldType::ndarray ? !is_valid_elem_type(elem) : elem != 0)
      fail_at(file, c.file_offset() - 3,
              detail::concat("field '", f.name, "' has invalid element type code ", int(elem)));
    f.elem = ElemType(elem);
    if (rank > kMaxArrayRank || (f.type != FieldType::ndarray && rank != 0))
      fail_at(file, c.file_offset() - 2,
              detail::concat("field '", f.name, "' has invalid rank ", int(rank)));
    if (flags > 1)
      fail_at(file, c.file_offset() - 1,
              detail::concat("field '", f.name, "' has unknown flags ", int(flags)));
    f.indexed = flags & 1;
    for (uint8_t r = 0; r < rank; ++r) {
      int64_t dim = c.i64("an array dimension");
      if (dim < -1 || dim > int64_t(UINT32_MAX))
        fail_at(file, c.file_offset() - 8,
                detail::concat("field '", f.name, "' has dimension ", dim));
      f.shape.push_back(dim);
    }
    fields.push_back(std::move(f));
  }
  Meta meta;
  try {
    meta.schema = Schema(std::move(fields));
  } catch (const FileError&) {
    throw;
  } catch (const Error& e) {
    fail_at(file, offset, detail::concat("invalid schema: ", e.what()));
  }
  uint64_t shards_at = c.file_offset();
  uint32_t shard_count = c.u32("the shard count");
  if (shard_count == 0 || shard_count > kMaxShards)
    fail_at(file, shards_at, detail::concat("the shard list has ", shard_count, " names"));
  // Each name takes at least 3 bytes, so a lying count cannot make us reserve much.
  if (uint64_t(shard_count) * 3 > c.remaining())
    fail_at(file, shards_at,
            detail::concat("the shard list claims ", shard_count, " names but only ", c.remaining(),
                           " bytes remain"));
  std::set<std::string> seen;
  for (uint32_t i = 0; i < shard_count; ++i) {
    uint64_t name_at = c.file_offset();
    uint16_t length = c.u16("a shard name length");
    auto bytes = c.bytes(length, "a shard name");
    std::string name(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    check_name(name, file, name_at, "a shard file name");
    // The names are opened next to this file: never let a file point elsewhere.
    if (name.find('/') != std::string::npos || name == "." || name == "..")
      fail_at(file, name_at,
              detail::concat("shard file name '", name, "' is not a plain file name"));
    if (!seen.insert(name).second)
      fail_at(file, name_at, detail::concat("shard file name '", name, "' appears twice"));
    meta.shard_names.push_back(std::move(name));
  }
  if (c.remaining() != 0)
    fail_at(file, c.file_offset(),
            detail::concat(c.remaining(), " unexpected bytes at the end of the meta section"));
  return meta;
}

void encode_page_header(const PageHeader& p, uint8_t* out) {
  store<uint32_t>(out, p.magic);
  store<uint32_t>(out + 4, p.used_bytes);
  store<uint64_t>(out + 8, p.first_row);
  store<uint32_t>(out + 16, p.row_count);
  store<uint32_t>(out + 20, p.span);
}

PageHeader decode_page_header(const uint8_t* data, uint64_t offset, const std::string& file) {
  PageHeader p;
  p.magic = load<uint32_t>(data);
  p.used_bytes = load<uint32_t>(data + 4);
  p.first_row = load<uint64_t>(data + 8);
  p.row_count = load<uint32_t>(data + 16);
  p.span = load<uint32_t>(data + 20);
  if (p.magic != kPageMagic)
    fail_at(file, offset, detail::concat("page magic 0x", std::hex, p.magic, " is not \"PAGE\""));
  return p;
}

uint64_t index_key_int(int64_t v) {
  return uint64_t(v) ^ (1ull << 63);
}

uint64_t index_key_float(double v) {
  if (v == 0) v = 0;  // -0.0 and +0.0 compare equal, so they share a key
  if (std::isnan(v)) v = std::numeric_limits<double>::quiet_NaN();
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  return (bits >> 63) ? ~bits : bits | (1ull << 63);
}

uint64_t index_key_string(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace kiln::record
