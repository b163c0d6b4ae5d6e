// `kiln record info|verify` through their functions, and verify's exit codes through the binary.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <sstream>

#include "kiln/cli/record_command.h"
#include "record/record_test_util.h"
#include "testing/file_contents.h"

namespace kiln::record::record_command_test {
namespace {
using testing::ScratchDir;

TEST(RecordCli, InfoListsSchemaRowsAndMissingShards) {
  ScratchDir dir;
  testing::write_small_set(dir / "set", 30, 3);
  std::string info = cli::record_info_text(dir / "set1");
  EXPECT_NE(info.find("rows: 30 in the set, 10 in this file"), std::string::npos) << info;
  EXPECT_NE(info.find("label: int32 (indexed)"), std::string::npos) << info;
  EXPECT_NE(info.find("vec: ndarray float32[3]"), std::string::npos) << info;
  EXPECT_NE(info.find(dir / "set2"), std::string::npos) << info;
  EXPECT_EQ(info.find("MISSING"), std::string::npos) << info;
  ::unlink((dir / "set2").c_str());
  info = cli::record_info_text(dir / "set1");
  EXPECT_NE(info.find("MISSING"), std::string::npos) << info;
  EXPECT_NE(info.find("1 of 3 shards are missing"), std::string::npos) << info;
  std::string json = cli::record_info_json(dir / "set0");
  EXPECT_NE(json.find("\"total_rows\": 30"), std::string::npos) << json;
  EXPECT_NE(json.find("\"present\": false"), std::string::npos) << json;
  EXPECT_THROW(cli::record_info_text(dir / "nothing"), FileError);
}

TEST(RecordCli, VerifyReturnsZeroForWholeSetsAndOneOtherwise) {
  ScratchDir dir;
  testing::write_small_set(dir / "set", 30, 2);
  std::ostringstream out;
  EXPECT_EQ(cli::run_record_verify({dir / "set0"}, out), 0);
  EXPECT_NE(out.str().find("OK (2 shard files, 30 rows"), std::string::npos) << out.str();
  auto bytes = kiln::testing::file_bytes(dir / "set1");
  bytes[bytes.size() / 2] ^= 1;
  testing::write_file(dir / "set1", bytes);
  out.str("");
  EXPECT_EQ(cli::run_record_verify({dir / "set0"}, out), 1);
  EXPECT_NE(out.str().find("DAMAGED"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find(dir / "set1"), std::string::npos) << out.str();
}

int run_kiln(const std::string& args) {
  std::string cmd = std::string(KILN_BINARY_DIR "/src/kiln/kiln ") + args + " >/dev/null 2>&1";
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(RecordCli, VerifyExitCodesThroughTheBinary) {
  if (!testing::file_exists(KILN_BINARY_DIR "/src/kiln/kiln")) GTEST_SKIP() << "no kiln binary";
  ScratchDir dir;
  testing::write_small_set(dir / "set", 12, 2);
  EXPECT_EQ(run_kiln("record verify " + dir / "set0"), 0);
  EXPECT_EQ(run_kiln("record info " + dir / "set1"), 0);
  auto bytes = kiln::testing::file_bytes(dir / "set0");
  bytes[100] ^= 0x10;  // in the header
  testing::write_file(dir / "set0", bytes);
  EXPECT_EQ(run_kiln("record verify " + dir / "set0"), 1);
  EXPECT_EQ(run_kiln("record verify " + dir / "set1"), 1);  // its sibling is damaged
  ::unlink((dir / "set0").c_str());
  EXPECT_EQ(run_kiln("record verify " + dir / "set1"), 1);  // its sibling is missing
  EXPECT_EQ(run_kiln("record verify"), 2);                  // usage error
}

}  // namespace
}  // namespace kiln::record::record_command_test
