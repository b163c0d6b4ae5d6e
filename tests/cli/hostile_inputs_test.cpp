// The `kiln` executable on hostile files and flags: every one ends with exit status 2 and one
// "kiln: error: ..." line naming the file, field or flag, never a signal, never a library's
// internal message, never training on nonsense.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "testing/kiln_command.h"

namespace kiln::cli::hostile_inputs_test {
namespace {

namespace fs = std::filesystem;
using Result = kiln::testing::CommandResult;

Result run(const std::string& args) {
  return kiln::testing::run_kiln(args);
}

fs::path temp_dir(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("kiln_hostile_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

std::vector<uint8_t> idx(const std::vector<uint32_t>& dims, size_t data_bytes) {
  std::vector<uint8_t> b = {0, 0, 0x08, uint8_t(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t((d >> s) & 0xff));
  }
  b.resize(b.size() + data_bytes, 0);
  return b;
}

void expect_clean_usage_error(const Result& r, const std::vector<std::string>& parts) {
  EXPECT_TRUE(r.exited) << "killed by a signal: " << r.output;
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output.rfind("kiln: error: ", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find("internal"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("bad_alloc"), std::string::npos) << r.output;
  for (const std::string& p : parts)
    EXPECT_NE(r.output.find(p), std::string::npos) << p << " in " << r.output;
}

TEST(HostileInputs, IdxHeaderWhoseDimensionsOverflow) {
  fs::path dir = temp_dir("idx");
  // 2^31 x 2^31 x 2^31 images: the element count overflowed to 0 and `kiln train` crashed.
  write(dir / "train-images-idx3-ubyte", idx({1u << 31, 1u << 31, 1u << 31}, 16));
  write(dir / "train-labels-idx1-ubyte", idx({10}, 10));
  write(dir / "t10k-images-idx3-ubyte", idx({10, 28, 28}, 10 * 28 * 28));
  write(dir / "t10k-labels-idx1-ubyte", idx({10}, 10));
  std::string file = (dir / "train-images-idx3-ubyte").string();
  expect_clean_usage_error(run("train --steps 1 --data-dir " + dir.string()),
                           {file, "overflow", "byte offsets 4 to 15"});
  expect_clean_usage_error(run("data bench --source fashion-mnist:" + dir.string() + ":train"),
                           {file, "overflow"});
  // Dimensions that fit 64 bits but not the file: refused before allocating them.
  write(dir / "train-images-idx3-ubyte", idx({60000, 1u << 20, 1u << 20}, 100));
  expect_clean_usage_error(run("train --steps 1 --data-dir " + dir.string()),
                           {file, "60000 x 1048576 x 1048576", "the file holds 100"});
  fs::remove_all(dir);
}

TEST(HostileInputs, NumbersAreCheckedOnTheCommandLine) {
  for (const std::string& args :
       {"--lr nan", "--lr -inf", "--lr -0.1", "--lr 0", "--lr inf", "--steps -1", "--seed -1",
        "--epochs 0", "--batch-size -5", "--threads -1"}) {
    std::string flag = args.substr(0, args.find(' '));
    std::string value = args.substr(args.find(' ') + 1);
    expect_clean_usage_error(run("train " + args), {flag, "'" + value + "'"});
  }
}

TEST(HostileInputs, ConfigAndResumeFoldersAndNullKeys) {
  fs::path dir = temp_dir("cfg");
  expect_clean_usage_error(run("train --config " + dir.string()), {dir.string(), "is a folder"});
  expect_clean_usage_error(run("train --resume " + dir.string()), {dir.string(), "is a folder"});
  std::ofstream(dir / "null.yaml") << "epochs: 2\n~: 3\n";
  expect_clean_usage_error(run("train --config " + (dir / "null.yaml").string()),
                           {(dir / "null.yaml").string(), "line 2"});
  std::ofstream(dir / "novalue.yaml") << "lr:\n";
  expect_clean_usage_error(run("train --config " + (dir / "novalue.yaml").string()),
                           {(dir / "novalue.yaml").string(), "'lr' has no value"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::cli::hostile_inputs_test
