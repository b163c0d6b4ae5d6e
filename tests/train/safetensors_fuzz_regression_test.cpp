// Inputs the checkpoint fuzzer (fuzz/checkpoint_fuzzer.cpp) found crashing the safetensors
// decoder, kept as regression tests: each must be a FileError naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "kiln/core/error.h"
#include "kiln/train/safetensors.h"

namespace kiln::train::safetensors_fuzz_regression_test {
namespace {

std::string with_header(const std::string& json, const std::string& data = "") {
  std::string out(8, '\0');
  uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + data;
}

// A number beyond a double's range is valid JSON syntax, but nlohmann::json refuses it with an
// out_of_range exception, which escaped decode_safetensors (only parse_error was caught) and
// ended the process (found as `"crc32.w":21939e524` in a mutated checkpoint).
TEST(SafetensorsFuzzRegression, NumberOutOfRangeInTheHeader) {
  for (const char* json : {R"({"__metadata__":{"epoch":21939e524}})",
                           R"({"w":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})",
                           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,-1e400]}})"}) {
    try {
      decode_safetensors(with_header(json, "abcd"), "regression.safetensors");
      FAIL() << "accepted " << json;
    } catch (const FileError& e) {
      EXPECT_NE(std::string(e.what()).find("regression.safetensors"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln::train::safetensors_fuzz_regression_test
