// Temporaries of atomic writes: their names, and the cleanup of those whose writer was killed.
#include "kiln/core/temporary_files.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace kiln::temporary_files_test {
namespace {

namespace fs = std::filesystem;

std::string fresh_folder(const std::string& name) {
  fs::path dir = fs::temp_directory_path() /
                 ("kiln_temporary_files_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void write(const std::string& path) {
  std::ofstream(path) << "partial";
}

pid_t a_pid_no_process_has() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

TEST(TemporaryFiles, AreHiddenBesideTheFinalFileWithThisProcessId) {
  const std::string pid = std::to_string(::getpid());
  EXPECT_EQ(temporary_path("/a/b/report.html"), "/a/b/.report.html.tmp-" + pid);
  EXPECT_EQ(temporary_path("model.onnx"), ".model.onnx.tmp-" + pid);
  EXPECT_EQ(temporary_path("/a/x.safetensors", ".tmp."), "/a/.x.safetensors.tmp." + pid);
}

TEST(TemporaryFiles, OnlyThoseOfWritersThatAreGoneAreRemoved) {
  const std::string dir = fresh_folder("gone");
  const std::string dead = dir + "/.trace.json.tmp-" + std::to_string(a_pid_no_process_has());
  const std::string mine = dir + "/.report.html.tmp-" + std::to_string(::getpid());
  const std::string live = dir + "/.ops.csv.tmp-" + std::to_string(::getppid());
  const std::string kept[] = {
      live,                          // its writer may still be at work
      dir + "/trace.json.tmp-1",     // not hidden: not one of ours
      dir + "/.trace.json.tmp-12a",  // not a process id
      dir + "/.trace.json.tmp-",     // no process id
      dir + "/trace.json",           // a final file
  };
  for (const std::string& p : kept) write(p);
  write(dead);
  write(mine);
  std::vector<std::string> removed = remove_stale_temporaries(dir);
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> expected{dead, mine};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(removed, expected);
  for (const std::string& p : kept) EXPECT_TRUE(fs::exists(p)) << p;
  EXPECT_FALSE(fs::exists(dead));
  fs::remove_all(dir);
}

TEST(TemporaryFiles, OfOneFileLeaveOtherFilesTemporariesAlone) {
  const std::string dir = fresh_folder("of_one");
  const std::string gone = std::to_string(a_pid_no_process_has());
  const std::string own = dir + "/.model.onnx.tmp-" + gone;
  const std::string other = dir + "/.other.onnx.tmp-" + gone;  // another file's writer
  const std::string longer = dir + "/.x.model.onnx.tmp-" + gone;
  for (const std::string& p : {own, other, longer}) write(p);
  EXPECT_EQ(remove_stale_temporaries_of(dir + "/model.onnx"), std::vector<std::string>{own});
  EXPECT_TRUE(fs::exists(other));
  EXPECT_TRUE(fs::exists(longer));
  fs::remove_all(dir);
}

TEST(TemporaryFiles, AFolderThatCannotBeReadRemovesNothing) {
  EXPECT_TRUE(remove_stale_temporaries("/nonexistent/kiln").empty());
  EXPECT_TRUE(remove_stale_temporaries_of("/nonexistent/kiln/model.onnx").empty());
}

}  // namespace
}  // namespace kiln::temporary_files_test
