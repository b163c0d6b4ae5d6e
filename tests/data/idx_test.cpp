// The IDX reader on hostile headers: overflowing or lying dimensions are FileErrors naming the
// file, the field's byte offset and the values, found before anything is allocated.
#include "kiln/data/idx.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "kiln/core/error.h"

namespace kiln::data::idx_test {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> idx_header(const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> b = {0, 0, 0x08, uint8_t(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t((d >> s) & 0xff));
  }
  return b;
}

std::string write(const std::string& name, const std::vector<uint8_t>& bytes, bool gz) {
  fs::path p = fs::temp_directory_path() / ("kiln_idx_" + std::to_string(::getpid()) + "_" + name);
  if (gz) {
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  return p.string();
}

// The FileError's message, or "" when read_idx succeeded.
std::string error_of(const std::string& path, uint32_t rank) {
  try {
    read_idx(path, rank);
  } catch (const FileError& e) {
    return e.what();
  }
  return "";
}

void expect_has(const std::string& m, const std::string& part) {
  EXPECT_NE(m.find(part), std::string::npos) << "'" << part << "' not in: " << m;
}

TEST(Idx, ReadsPlainAndGzipped) {
  std::vector<uint8_t> b = idx_header({2, 3});
  for (int i = 0; i < 6; ++i) b.push_back(uint8_t(i));
  for (bool gz : {false, true}) {
    std::string p = write(gz ? "ok.gz" : "ok", b, gz);
    IdxArray a = read_idx(p, 2);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a.data.to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 2, 3, 4, 5}));
    fs::remove(p);
  }
}

TEST(Idx, DimensionsWhoseProductOverflowsAreRefused) {
  // 2^31 cubed is 2^93: the product wrapped to 0 and the reader used to crash.
  for (bool gz : {false, true}) {
    std::string p = write("overflow", idx_header({1u << 31, 1u << 31, 1u << 31}), gz);
    std::string m = error_of(p, 3);
    expect_has(m, p);
    expect_has(m, "2147483648 x 2147483648 x 2147483648");
    expect_has(m, "overflow");
    expect_has(m, "byte offsets 4 to 15");
    fs::remove(p);
  }
}

TEST(Idx, DimensionsBeyondThePlainFilesSizeAreRefusedBeforeAllocating) {
  // 2^31 x 2^31 x 4 = 2^64 / 1 overflows; 2^20 x 2^20 x 2^20 = 2^60 bytes does not, and must not
  // be allocated.
  std::vector<uint8_t> b = idx_header({1u << 20, 1u << 20, 1u << 20});
  b.resize(b.size() + 100, 7);
  std::string p = write("huge", b, false);
  std::string m = error_of(p, 3);
  expect_has(m, p);
  expect_has(m, "1048576 x 1048576 x 1048576");
  expect_has(m, "need 1152921504606846976 bytes of data from byte offset 16");
  expect_has(m, "the file holds 100");
  fs::remove(p);
}

TEST(Idx, GzippedDataShorterThanTheHeaderSaysIsTruncatedWithoutAllocatingIt) {
  std::vector<uint8_t> b = idx_header({1u << 20, 1u << 20, 1u << 20});
  b.resize(b.size() + 100, 7);
  std::string p = write("huge.gz", b, true);
  std::string m = error_of(p, 3);
  expect_has(m, p);
  expect_has(m, "truncated");
  expect_has(m, "from byte offset 16");
  expect_has(m, "ends at 116");
  fs::remove(p);
}

TEST(Idx, DataLongerThanTheDimensionsIsRefused) {
  std::vector<uint8_t> b = idx_header({2, 2});
  b.resize(b.size() + 5, 1);  // one byte too many
  for (bool gz : {false, true}) {
    std::string p = write(gz ? "long.gz" : "long", b, gz);
    std::string m = error_of(p, 2);
    expect_has(m, p);
    expect_has(m, "2 x 2");
    fs::remove(p);
  }
}

TEST(Idx, ZeroOrHugeSingleDimensionAndWrongMagicNameTheOffset) {
  std::string zero = write("zero", idx_header({3, 0}), false);
  std::string m = error_of(zero, 2);
  expect_has(m, "bad dimension 1 = 0 at byte offset 8");
  fs::remove(zero);
  std::string huge = write("huge1", idx_header({0xffffffffu}), false);
  expect_has(error_of(huge, 1), "bad dimension 0 = 4294967295 at byte offset 4");
  fs::remove(huge);
  std::string rank = write("rank", idx_header({1, 1}), false);
  expect_has(error_of(rank, 3), "magic at byte offset 0");
  fs::remove(rank);
  std::string empty = write("empty", {}, false);
  expect_has(error_of(empty, 1), "truncated");
  fs::remove(empty);
}

TEST(Idx, AFolderIsNotAFile) {
  expect_has(error_of(fs::temp_directory_path().string(), 3), "is a folder");
  expect_has(error_of("/nonexistent/idx", 3), "cannot open");
}

}  // namespace
}  // namespace kiln::data::idx_test
