#pragma once
// A whole file read into memory: what a test checks Kiln wrote, or a corpus file it feeds in. A
// file that cannot be opened fails the test, rather than reading as empty.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace kiln::testing {

inline std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::vector<uint8_t> file_bytes(const std::filesystem::path& path) {
  const std::string text = file_text(path);
  return {text.begin(), text.end()};
}

}  // namespace kiln::testing
