// The safetensors reader never trusts a file; writes are atomic even under SIGKILL.
#include "kiln/train/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "kiln/core/error.h"
#include "kiln/train/checkpoint.h"

namespace kiln::train::safetensors_test {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("kiln_train_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::vector<nn::NamedTensor> sample_tensors() {
  std::vector<bf16_t> bf{float_to_bf16(1.5f), float_to_bf16(-2.f)};
  return {{"w", Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})},
          {"step", Tensor::scalar(7, DType::i64)},
          {"ids", Tensor::from_vector(std::vector<int32_t>{-1, 5}, {2})},
          {"half", Tensor::from_vector(bf, {2})},
          {"bytes", Tensor::from_vector(std::vector<uint8_t>{9, 8, 7}, {3})},
          {"empty", Tensor::zeros({0, 4})}};
}

void expect_error_mentions(const std::string& bytes, const std::vector<std::string>& parts) {
  try {
    decode_safetensors(bytes, "bad.safetensors");
    FAIL() << "expected FileError for " << parts[0];
  } catch (const FileError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("bad.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find("offset"), std::string::npos) << m;
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
  }
}

std::string with_header(const std::string& json, const std::string& data) {
  uint64_t n = json.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + json + data;
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  auto tensors = sample_tensors();
  std::string bytes = encode_safetensors(tensors, {{"epoch", "3"}});
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);  // data section aligned
  SafetensorsFile f = decode_safetensors(bytes, "x");
  ASSERT_EQ(f.tensors.size(), tensors.size());
  EXPECT_EQ(f.metadata.at("epoch"), "3");
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(f.tensors[i].first, tensors[i].first);
    EXPECT_EQ(f.tensors[i].second.shape(), tensors[i].second.shape());
    EXPECT_EQ(f.tensors[i].second.dtype(), tensors[i].second.dtype());
    EXPECT_EQ(0, std::memcmp(f.tensors[i].second.raw_data(), tensors[i].second.raw_data(),
                             tensors[i].second.nbytes()));
  }
  // The header is plain safetensors JSON other tools read.
  std::string json = bytes.substr(8, header_len);
  EXPECT_NE(json.find("\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"),
            std::string::npos)
      << json;
}

TEST(Safetensors, NonContiguousTensorsAreWrittenInLogicalOrder) {
  Shape s{1, 2, 2, 2};
  Tensor cl = Tensor::empty_strided(s, channels_last_strides(s), DType::f32);
  std::vector<float> v{0, 1, 2, 3, 4, 5, 6, 7};
  cl.copy_from(Tensor::from_vector(v, s));
  SafetensorsFile f = decode_safetensors(encode_safetensors({{"x", cl}}), "x");
  EXPECT_EQ(f.tensors[0].second.to_vector<float>(), v);
}

TEST(Safetensors, TruncatedFilesAreFileErrorsWithOffsets) {
  std::string bytes = encode_safetensors(sample_tensors());
  expect_error_mentions(bytes.substr(0, 5), {"too short"});
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  expect_error_mentions(bytes.substr(0, 8 + header_len / 2), {"header length"});
  // Cut inside the data: the tensor whose bytes are missing is named.
  expect_error_mentions(bytes.substr(0, 8 + header_len + 10), {"outside", "truncated"});
  // Every possible truncation fails cleanly (no crash, no out-of-bounds read).
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_THROW(decode_safetensors(bytes.substr(0, cut), "cut"), FileError) << cut;
  }
}

TEST(Safetensors, LyingHeadersAreRejected) {
  std::string huge(8, '\xff');
  expect_error_mentions(huge + "{}", {"header length"});
  expect_error_mentions(with_header("{\"a\":", ""), {"not valid JSON"});
  expect_error_mentions(with_header("[1,2]", ""), {"not a JSON object"});
  expect_error_mentions(with_header(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
                                    std::string(8, '\0')),
                        {"unsupported dtype 'F64'"});
  expect_error_mentions(with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                                    std::string(8, '\0')),
                        {"'a'", "8 bytes of data for shape [3]"});
  expect_error_mentions(with_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                                    std::string(4, '\0')),
                        {"negative"});
  expect_error_mentions(
      with_header(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
                  std::string(4, '\0')),
      {"'a'"});
  expect_error_mentions(with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                    R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                                    std::string(8, '\0')),
                        {"overlap"});
  expect_error_mentions(
      with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}})", std::string(8, '\0')),
      {"'a'"});
  expect_error_mentions(with_header(R"({"__metadata__":{"k":1}})", ""), {"not a string"});
}

TEST(Safetensors, AtomicWriteReplacesAndLeavesNoTemporary) {
  std::string dir = temp_dir("atomic");
  std::string path = dir + "/a.safetensors";
  write_file_atomically(path, "first");
  write_file_atomically(path, "second");
  EXPECT_EQ(read_whole_file(path), "second");
  int files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  EXPECT_THROW(write_file_atomically(dir + "/missing/x.safetensors", "x"), FileError);
  EXPECT_THROW(read_whole_file(dir + "/nope.safetensors"), FileError);
  fs::remove_all(dir);
}

// A writer killed with SIGKILL at arbitrary moments never leaves a damaged file under the
// checkpoint's name: it holds either the previous checkpoint or the complete new one.
TEST(Safetensors, KillDuringSaveLeavesPreviousCheckpointIntact) {
  std::string dir = temp_dir("kill");
  std::string path = dir + "/ckpt.safetensors";
  Tensor small = Tensor::full({4}, 1.0);
  save_checkpoint({{"w", small}}, path, {{"version", "old"}});
  // ~24 MiB: a save takes long enough to be interrupted part-way.
  std::string big = encode_safetensors({{"w", Tensor::full({6 << 20}, 2.0)}}, {{"version", "new"}});
  int saw_new = 0;
  for (int attempt = 0; attempt < 6; ++attempt) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (;;) write_file_atomically(path, big);  // until killed
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + 17 * attempt));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    Checkpoint c = load_checkpoint(path);  // must parse
    const std::string& version = c.metadata.at("version");
    ASSERT_TRUE(version == "old" || version == "new") << version;
    ASSERT_EQ(c.tensors.size(), 1u);
    EXPECT_EQ(c.tensors[0].second.numel(), version == "old" ? 4 : (6 << 20));
    saw_new += version == "new";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::train::safetensors_test
