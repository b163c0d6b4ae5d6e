// The profiler's files are written whole or not at all, and what a killed writer left is removed.
#include "kiln/profile/files.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kiln::profile::files_test {
namespace {

namespace fs = std::filesystem;

TEST(ProfileFiles, AKilledWritersTemporaryIsRemovedWhenTheFileIsWrittenAgain) {
  const fs::path dir =
      fs::temp_directory_path() / ("kiln_profile_files_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const fs::path killed = dir / (".trace.json.tmp-" + std::to_string(gone));
  const fs::path other = dir / (".ops.csv.tmp-" + std::to_string(gone));  // another file's
  std::ofstream(killed) << "{\"traceEv";
  std::ofstream(other) << "op,";
  write_file_atomically((dir / "trace.json").string(), "{}");
  EXPECT_EQ(read_file((dir / "trace.json").string()), "{}");
  EXPECT_FALSE(fs::exists(killed));
  EXPECT_TRUE(fs::exists(other));  // removed when ops.csv is written, not before
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{other.filename().string(), "trace.json"}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::profile::files_test
