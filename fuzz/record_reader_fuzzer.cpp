// libFuzzer target for the record reader: any byte string, parsed as a shard file, must give
// rows or a kiln::Error — never a crash, an out-of-bounds read (ASan) or undefined behaviour
// (UBSan), never a huge allocation (-rss_limit_mb), never a hang (-timeout).
//
// Each input is tried twice: as it is, and "resealed" — every record, section and header CRC
// recomputed — because random mutations almost always break a checksum first, and the structural
// checks behind the checksums (lying lengths, offsets, counts, schemas) are what needs exploring.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/record/crc32c.h"
#include "kiln/record/format.h"
#include "kiln/record/shard_reader.h"
#include "kiln/record/verify.h"

namespace {
using namespace kiln::record;

template <class T>
T load(const std::vector<uint8_t>& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}
template <class T>
void store(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

bool in_bounds(uint64_t offset, uint64_t length, size_t size) {
  return length <= size && offset <= size - length;
}

// Recomputes the CRCs a well-meaning writer would have stored, wherever the (possibly lying)
// offsets allow it. Everything here is bounds-checked: it runs on hostile input too.
void reseal(std::vector<uint8_t>& b) {
  if (b.size() < kHeaderSize) return;
  auto section = [&](int i) {
    return std::pair{load<uint64_t>(b, 64 + 24 * size_t(i)),
                     load<uint64_t>(b, 64 + 24 * size_t(i) + 8)};
  };
  auto [rows_at, rows_len] = section(2);
  if (in_bounds(rows_at, rows_len, b.size())) {
    for (uint64_t e = 0; e + kRowEntrySize <= rows_len && e < 16 * 4096; e += kRowEntrySize) {
      uint64_t rec = load<uint64_t>(b, rows_at + e);
      if (!in_bounds(rec, kRecordHeaderSize, b.size())) continue;
      uint32_t len = load<uint32_t>(b, rec);
      if (!in_bounds(rec + kRecordHeaderSize, len, b.size())) continue;
      uint32_t crc = crc32c(b.data() + rec + kRecordHeaderSize, len);
      store<uint32_t>(b, rec + 4, crc);
      store<uint32_t>(b, rows_at + e + 12, crc);
    }
  }
  for (int i : {0, 2, 3}) {
    auto [at, len] = section(i);
    if (in_bounds(at, len, b.size()))
      store<uint32_t>(b, 64 + 24 * size_t(i) + 20, crc32c(b.data() + at, len));
  }
  store<uint64_t>(b, 56, b.size());  // the file-size field
  store<uint32_t>(b, kHeaderCrcOffset, crc32c(b.data(), kHeaderCrcOffset));
}

void exercise(const uint8_t* data, size_t size) {
  try {
    ShardReader shard("fuzz-input", data, size, nullptr);
    RowView view;
    uint64_t rows = std::min<uint64_t>(shard.num_rows(), 4096);
    uint64_t sink = 0;
    for (uint64_t r = 0; r < rows; ++r) {
      try {
        shard.read(r, view);
        for (const FieldView& f : view.fields) {
          // Touch every byte the reader hands out, so ASan sees any view past the input.
          for (uint8_t byte : f.data) sink += byte;
          sink += uint64_t(f.numel());
          if (f.field->type == FieldType::int32 || f.field->type == FieldType::int64)
            sink += uint64_t(f.as_int());
        }
      } catch (const kiln::Error&) {
      }
    }
    for (size_t f = 0; f < shard.schema().size(); ++f)
      if (shard.schema()[f].indexed) {
        try {
          for (uint64_t key : {index_key_int(0), index_key_int(1), index_key_float(0.0)})
            sink += shard.rows_with_key(int(f), key).size();
        } catch (const kiln::Error&) {
        }
      }
    VerifyReport report;
    verify_shard(shard, report, 4);
    sink += report.problem_count;
    asm volatile("" : : "r"(sink));
  } catch (const kiln::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  exercise(data, size);
  std::vector<uint8_t> resealed(data, data + size);  // an exact-size heap copy, like libFuzzer's
  reseal(resealed);
  exercise(resealed.data(), resealed.size());
  return 0;
}
