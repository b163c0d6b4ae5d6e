#pragma once
// The on-disk layout of one record shard file, byte for byte (docs/record-format.md is the
// prose version). Everything is little-endian. Every parser here treats its input as hostile:
// each length and offset is checked against the bytes that are really there before it is used,
// and every failure is a kiln::FileError naming the file and the byte offset.
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/record/schema.h"

namespace kiln::record {

static_assert(std::endian::native == std::endian::little,
              "the record format is little-endian; a big-endian port must byte-swap here");

inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'R', 'E', 'C', '\0'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kHeaderSize = 192;
inline constexpr size_t kHeaderCrcOffset = 188;
inline constexpr uint64_t kDataAlignment = 4096;    // the data section starts on a 4 KiB boundary
inline constexpr uint32_t kPageMagic = 0x45474150;  // "PAGE"
inline constexpr size_t kPageHeaderSize = 24;
inline constexpr size_t kRecordHeaderSize = 8;  // u32 payload length, u32 CRC-32C of the payload
inline constexpr size_t kRowEntrySize = 16;     // u64 record offset, u32 length, u32 CRC-32C
inline constexpr size_t kFieldIndexHeaderSize = 16;
inline constexpr size_t kFieldIndexEntrySize = 16;  // u64 key, u64 local row
inline constexpr uint32_t kMinPageSize = 4096;
inline constexpr uint32_t kMaxPageSize = 1u << 30;
inline constexpr uint32_t kDefaultPageSize = 1u << 20;
inline constexpr uint64_t kMaxRecordBytes = (1ull << 31) - 1;
inline constexpr uint32_t kMaxShards = 65536;

// [offset, offset + length) of one section, the number of items in it and a CRC-32C of its bytes
// (0 and unchecked for the data section, whose records carry their own CRCs).
struct SectionRef {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t count = 0;
  uint32_t crc = 0;
};

struct Header {
  uint32_t version = kFormatVersion;
  uint64_t dataset_id = 0;  // random, identical in every shard written by one commit()
  uint32_t shard_index = 0;
  uint32_t shard_count = 1;
  uint64_t total_rows = 0;  // rows in all shards together
  uint64_t row_count = 0;   // rows in this shard
  uint32_t page_size = kDefaultPageSize;
  uint32_t flags = 0;
  uint64_t file_size = 0;
  SectionRef meta;    // schema + shard file names; count = number of fields
  SectionRef data;    // pages; count = number of pages
  SectionRef rows;    // row table; count = row_count
  SectionRef fields;  // field indexes; count = number of indexed fields
};

// Rows are dealt round-robin: global row g lives in shard g % shard_count at local row
// g / shard_count, so shard s holds ceil((total - s) / shard_count) rows.
inline uint64_t rows_in_shard(uint64_t total_rows, uint32_t shard_count, uint32_t shard) {
  return total_rows > shard ? (total_rows - shard + shard_count - 1) / shard_count : 0;
}

struct PageHeader {
  uint32_t magic = kPageMagic;
  uint32_t used_bytes = 0;  // page header + records; the rest of the page is zero padding
  uint64_t first_row = 0;   // local row number of the page's first record
  uint32_t row_count = 0;
  uint32_t span = 1;  // page_size units this page occupies (> 1 only for one large record)
};

struct RowEntry {
  uint64_t offset = 0;  // file offset of the record header
  uint32_t length = 0;  // payload bytes
  uint32_t crc = 0;     // CRC-32C of the payload
};

struct Meta {
  Schema schema;
  std::vector<std::string> shard_names;  // file names (no directory) of all shards, in order
};

// Throws FileError "<file>: byte <offset>: <message>".
[[noreturn]] void fail_at(const std::string& file, uint64_t offset, const std::string& message);

// Bounds-checked little-endian reading of a byte range that lives at `base_offset` in `file`.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, uint64_t base_offset, const std::string& file)
      : data_(data), size_(size), pos_(0), base_(base_offset), file_(&file) {}

  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint8_t u8(const char* what) { return get<uint8_t>(what); }
  uint16_t u16(const char* what) { return get<uint16_t>(what); }
  uint32_t u32(const char* what) { return get<uint32_t>(what); }
  uint64_t u64(const char* what) { return get<uint64_t>(what); }
  int64_t i64(const char* what) { return get<int64_t>(what); }
  std::span<const uint8_t> bytes(uint64_t n, const char* what) {
    need(n, what);
    std::span<const uint8_t> s(data_ + pos_, size_t(n));
    pos_ += size_t(n);
    return s;
  }
  void need(uint64_t n, const char* what) const {
    if (n > size_ - pos_)
      fail(detail::concat(what, " needs ", n, " bytes but only ", size_ - pos_, " remain"));
  }
  size_t remaining() const { return size_ - pos_; }
  size_t position() const { return pos_; }
  uint64_t file_offset() const { return base_ + pos_; }
  [[noreturn]] void fail(const std::string& message) const {
    fail_at(*file_, file_offset(), message);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_;
  uint64_t base_;
  const std::string* file_;
};

// Little-endian appending, for the writer.
class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>& out) : out_(out) {}
  template <class T>
  void put(T v) {
    size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void put_bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }

 private:
  std::vector<uint8_t>& out_;
};

std::array<uint8_t, kHeaderSize> encode_header(const Header& h);
// Checks magic, version, the header CRC, the file size and that every section lies inside the
// file, in order, without overlap.
Header decode_header(const uint8_t* data, size_t file_size, const std::string& file);

std::vector<uint8_t> encode_meta(const Meta& meta);
Meta decode_meta(const uint8_t* data, size_t size, uint64_t offset, const std::string& file);

void encode_page_header(const PageHeader& p, uint8_t* out);
PageHeader decode_page_header(const uint8_t* data, uint64_t offset, const std::string& file);

inline RowEntry decode_row_entry(const uint8_t* p) {
  RowEntry e;
  std::memcpy(&e.offset, p, 8);
  std::memcpy(&e.length, p + 8, 4);
  std::memcpy(&e.crc, p + 12, 4);
  return e;
}

// Field-index keys are u64 values whose unsigned order is the field's natural order, so one sorted
// table serves every type: integers are offset by 2^63, floats are mapped to their IEEE total
// order (-0.0 folded onto +0.0, every NaN onto one), strings are a 64-bit FNV-1a hash (lookups
// then compare the strings themselves, so collisions cost time, never wrong answers).
uint64_t index_key_int(int64_t v);
uint64_t index_key_float(double v);
uint64_t index_key_string(std::string_view s);

}  // namespace kiln::record
