// A reader never trusts the file: every flipped byte and every truncation of a real file is
// caught, and lies told with valid checksums (an adversary, not a disk) give a FileError naming
// the file and the byte offset instead of a crash or a huge allocation.
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/record/crc32c.h"
#include "kiln/record/file_writer.h"
#include "kiln/record/record_reader.h"
#include "kiln/record/verify.h"
#include "record_test_util.h"
#include "testing/file_contents.h"

namespace kiln::record::record_corruption_test {
namespace {
using testing::ScratchDir;

std::vector<uint8_t> small_file(ScratchDir& dir, int rows = 24) {
  testing::write_small_set(dir / "f", rows, 1);
  return kiln::testing::file_bytes(dir / "f");
}

// Opens an in-memory file image and reads every row and every index; returns the error, or ""
// when everything read back equal to `reference` (rows compared field by field).
std::string read_everything(const std::vector<uint8_t>& bytes,
                            const std::vector<std::vector<std::string>>* reference = nullptr) {
  try {
    ShardReader shard("mem.krec", bytes.data(), bytes.size(), nullptr);
    RowView v;
    for (uint64_t r = 0; r < shard.num_rows(); ++r) {
      shard.read(r, v);
      if (reference)
        for (size_t f = 0; f < v.fields.size(); ++f)
          if (std::string(v[f].as_string()) != (*reference)[r][f]) return "DIFFERENT DATA";
    }
    for (size_t f = 0; f < shard.schema().size(); ++f)
      if (shard.schema()[f].indexed) shard.rows_with_key(int(f), index_key_int(3));
    return "";
  } catch (const FileError& e) {
    return e.what();
  }
}

TEST(RecordCorruption, EveryFlippedByteIsFoundAndNeverReadsWrongData) {
  ScratchDir dir;
  auto original = small_file(dir);
  std::vector<std::vector<std::string>> reference;
  {
    ShardReader shard("mem.krec", original.data(), original.size(), nullptr);
    RowView v;
    for (uint64_t r = 0; r < shard.num_rows(); ++r) {
      shard.read(r, v);
      reference.emplace_back();
      for (auto& f : v.fields) reference.back().emplace_back(f.as_string());
    }
  }
  ASSERT_EQ(read_everything(original, &reference), "");
  size_t undetected = 0;
  for (size_t at = 0; at < original.size(); ++at) {
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80)}) {
      auto bytes = original;
      bytes[at] ^= mask;
      // Reading never returns data that differs from what was written.
      std::string read_error = read_everything(bytes, &reference);
      ASSERT_NE(read_error, "DIFFERENT DATA") << "byte " << at;
      // verify finds every flip, in headers, data, padding, tables alike.
      bool found = !read_error.empty();
      if (!found) {
        VerifyReport report;
        ShardReader shard("mem.krec", bytes.data(), bytes.size(), nullptr);
        verify_shard(shard, report);
        found = !report.ok();
      }
      if (!found && ++undetected < 5) ADD_FAILURE() << "flip of byte " << at << " not found";
    }
  }
  EXPECT_EQ(undetected, 0u);
}

TEST(RecordCorruption, EveryTruncationIsRefusedWithTheFileName) {
  ScratchDir dir;
  auto original = small_file(dir);
  for (size_t n = 0; n < original.size(); ++n) {
    std::vector<uint8_t> bytes(original.begin(), original.begin() + std::ptrdiff_t(n));
    std::string error = read_everything(bytes);
    ASSERT_NE(error.find("mem.krec: byte "), std::string::npos) << n << ": " << error;
  }
  // Through the file system too, with the path in the message.
  auto cut = original;
  cut.resize(original.size() / 2);
  testing::write_file(dir / "cut", cut);
  try {
    RecordReader reader(dir / "cut");
    FAIL();
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "cut"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

// Patches bytes like an adversary would: then recomputes every section CRC and the header CRC,
// so only the structural checks can catch the lie.
class Forger {
 public:
  explicit Forger(std::vector<uint8_t> bytes) : b(std::move(bytes)) {}
  template <class T>
  T get(size_t at) const {
    T v;
    std::memcpy(&v, &b[at], sizeof(T));
    return v;
  }
  template <class T>
  void set(size_t at, T v) {
    std::memcpy(&b[at], &v, sizeof(T));
  }
  uint64_t section_offset(int i) const { return get<uint64_t>(64 + 24 * size_t(i)); }
  uint64_t section_length(int i) const { return get<uint64_t>(64 + 24 * size_t(i) + 8); }
  uint64_t record_offset(uint64_t row) const { return get<uint64_t>(section_offset(2) + row * 16); }
  // After a payload edit: the record's CRC in its header and in the row table.
  void reseal_record(uint64_t row) {
    uint64_t at = record_offset(row);
    uint32_t length = get<uint32_t>(at);
    uint32_t crc = crc32c(&b[at + 8], length);
    set<uint32_t>(at + 4, crc);
    set<uint32_t>(section_offset(2) + row * 16 + 12, crc);
  }
  std::vector<uint8_t> sealed() {
    for (int i : {0, 2, 3}) {
      uint64_t off = section_offset(i), len = section_length(i);
      if (off + len <= b.size()) set<uint32_t>(64 + 24 * size_t(i) + 20, crc32c(&b[off], len));
    }
    set<uint32_t>(188, crc32c(b.data(), 188));
    return b;
  }
  std::vector<uint8_t> b;
};

// The error of reading the forged file, which must name the file and the expected offset.
void expect_error_at(const std::vector<uint8_t>& bytes, uint64_t offset, const std::string& words) {
  std::string error = read_everything(bytes);
  EXPECT_NE(error.find("mem.krec: byte " + std::to_string(offset) + ":"), std::string::npos)
      << "expected byte " << offset << ", got: " << error;
  EXPECT_NE(error.find(words), std::string::npos) << error;
}

TEST(RecordCorruption, LyingLengthsAndOffsetsWithValidChecksums) {
  ScratchDir dir;
  const auto original = small_file(dir);
  Forger base(original);
  const uint64_t rows_at = base.section_offset(2);

  {  // a row-table entry pointing past the end of the file
    Forger f(original);
    f.set<uint64_t>(rows_at + 5 * 16, uint64_t(1) << 40);
    expect_error_at(f.sealed(), rows_at + 5 * 16, "outside the data section");
  }
  {  // a record length that runs past the data section
    Forger f(original);
    f.set<uint32_t>(rows_at + 16 + 8, 0xFFFFFFF0u);
    expect_error_at(f.sealed(), rows_at + 16, "outside the data section");
  }
  {  // the record header disagrees with the row table
    Forger f(original);
    uint64_t rec = f.record_offset(2);
    f.set<uint32_t>(rec, f.get<uint32_t>(rec) - 1);
    expect_error_at(f.sealed(), rec, "disagrees with the row table");
  }
  {  // a string length inside a record that lies (record CRC recomputed too)
    Forger f(original);
    uint64_t rec = f.record_offset(3);
    f.set<uint32_t>(rec + 8 + 4, 0x7FFFFFFFu);  // after the int32 label: the name's length
    f.reseal_record(3);
    expect_error_at(f.sealed(), rec + 8 + 4, "claims 2147483647 bytes");
  }
  {  // the header's section table points past the end
    Forger f(original);
    f.set<uint64_t>(64 + 24 * 3, original.size() - 4);
    expect_error_at(f.sealed(), 64 + 24 * 3, "runs past the end of the file");
  }
  {  // a row count that does not match the round-robin deal
    Forger f(original);
    f.set<uint64_t>(40, 25);
    expect_error_at(f.sealed(), 40, "holds 25 rows");
  }
  {  // a newer format version
    Forger f(original);
    f.set<uint32_t>(8, 2);
    expect_error_at(f.sealed(), 8, "version 2 is not supported");
  }
  {  // a field-index entry pointing at a row that does not exist
    Forger f(original);
    uint64_t idx = f.section_offset(3) + 16;  // first table (label): find a label-3 entry
    while (f.get<uint64_t>(idx) != index_key_int(3)) idx += 16;
    f.set<uint64_t>(idx + 8, 1000000);
    auto bytes = f.sealed();
    std::string error = read_everything(bytes);
    EXPECT_NE(error.find("mem.krec: byte " + std::to_string(idx + 8)), std::string::npos) << error;
  }
}

TEST(RecordCorruption, SchemaThatDoesNotMatchTheData) {
  ScratchDir dir;
  const auto original = small_file(dir);
  Forger f(original);
  uint64_t meta = f.section_offset(0);
  // Field 0 ("label", int32) becomes int64: every record is now misparsed.
  uint64_t type_at = meta + 4 + 2 + 5;
  ASSERT_EQ(f.b[type_at], uint8_t(FieldType::int32));
  f.b[type_at] = uint8_t(FieldType::int64);
  // The field index of an int64 field is still valid, so only the data can tell.
  std::string error = read_everything(f.sealed());
  EXPECT_NE(error.find("mem.krec: byte "), std::string::npos) << error;
  EXPECT_TRUE(error.find("schema") != std::string::npos ||
              error.find("remain") != std::string::npos)
      << error;
}

TEST(RecordCorruption, HostileSchemaAndShardNames) {
  ScratchDir dir;
  // A one-field set whose shard name we can replace: "f" -> a path outside the directory.
  {
    FileWriter w(dir / "f");
    w.add_schema({Field::array("a", ElemType::uint8, {-1, -1})});
    w.write_raw_data({Row{{"a", Value::array<uint8_t>({1, 2}, {7, 8})}}});
    w.commit();
  }
  const auto original = kiln::testing::file_bytes(dir / "f");
  Forger base(original);
  uint64_t meta = base.section_offset(0);
  uint64_t names_at = base.section_offset(0) + base.section_length(0) - 3;  // u16 len + "f"
  {
    Forger f(original);
    f.b[names_at + 2] = '/';
    expect_error_at(f.sealed(), names_at, "not a plain file name");
  }
  {  // free dimensions that multiply past the record: no allocation, an error
    Forger f(original);
    uint64_t rec = f.record_offset(0);
    f.set<uint32_t>(rec + 8, 0xFFFFFFFFu);
    f.set<uint32_t>(rec + 12, 0xFFFFFFFFu);
    f.reseal_record(0);
    expect_error_at(f.sealed(), rec + 8, "elements needs more than");
  }
  {  // an absurd field count
    Forger f(original);
    f.set<uint32_t>(meta, 0xFFFFFFFFu);
    std::string error = read_everything(f.sealed());
    EXPECT_NE(error.find("mem.krec: byte "), std::string::npos) << error;
  }
  {  // an unknown field type code
    Forger f(original);
    f.b[meta + 4 + 2 + 1] = 99;
    expect_error_at(f.sealed(), meta + 4 + 2 + 1, "unknown type code 99");
  }
}

TEST(RecordCorruption, NotARecordFile) {
  ScratchDir dir;
  testing::write_file(dir / "junk", std::vector<uint8_t>(4096, 'x'));
  try {
    RecordReader reader(dir / "junk");
    FAIL();
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("not a Kiln record file"), std::string::npos);
  }
  EXPECT_THROW(RecordReader(dir / "does-not-exist"), FileError);
  EXPECT_THROW(RecordReader(dir.path()), FileError);  // a directory
}

}  // namespace
}  // namespace kiln::record::record_corruption_test
