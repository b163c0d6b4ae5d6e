// Writing is atomic: a writer killed before commit() leaves nothing under the final names and
// the previous set intact; sets mixed from two commits are refused.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "kiln/record/file_writer.h"
#include "kiln/record/record_reader.h"
#include "kiln/record/verify.h"
#include "record_test_util.h"
#include "testing/file_contents.h"

namespace kiln::record::record_atomicity_test {
namespace {
using testing::file_exists;
using testing::ScratchDir;

// Forks a child that writes rows to `path` without end (never committing) and SIGKILLs it once
// it has written `batches` batches. Returns the child's pid (dead and reaped).
pid_t kill_writer_mid_write(const std::string& path, int shards, bool overwrite, int batches) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) std::abort();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    try {
      FileWriter writer(path, shards, {.overwrite = overwrite, .page_size = 4096});
      writer.add_schema(testing::small_schema());
      for (int b = 0;; ++b) {
        std::vector<Row> rows;
        for (int i = 0; i < 50; ++i) rows.push_back(testing::small_row(b * 50 + i));
        writer.write_raw_data(rows);
        if (b + 1 == batches) {
          char c = 1;
          if (::write(pipe_fds[1], &c, 1) != 1) ::_exit(3);
        }
      }
    } catch (...) {
      ::_exit(2);
    }
  }
  ::close(pipe_fds[1]);
  char c = 0;
  ssize_t got = ::read(pipe_fds[0], &c, 1);
  ::close(pipe_fds[0]);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(got, 1) << "the child writer failed before it was killed";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  return pid;
}

TEST(RecordAtomicity, WriterKilledBeforeCommitLeavesNoFinalFile) {
  ScratchDir dir;
  kill_writer_mid_write(dir / "set", 2, false, 20);
  EXPECT_FALSE(file_exists(dir / "set0"));
  EXPECT_FALSE(file_exists(dir / "set1"));
  auto leftovers = dir.files();
  ASSERT_EQ(leftovers.size(), 2u);  // the dead writer's hidden temporaries, nothing else
  for (const auto& name : leftovers) EXPECT_EQ(name.rfind(".set", 0), 0u) << name;
  // The next writer for the same name removes the dead writer's temporaries.
  testing::write_small_set(dir / "set", 7, 2);
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"set0", "set1"}));
  EXPECT_EQ(RecordReader(dir / "set0").num_rows(), 7u);
}

TEST(RecordAtomicity, KilledOverwriteLeavesThePreviousSetIntact) {
  ScratchDir dir;
  testing::write_small_set(dir / "set", 11, 2);
  auto before0 = kiln::testing::file_bytes(dir / "set0");
  auto before1 = kiln::testing::file_bytes(dir / "set1");
  kill_writer_mid_write(dir / "set", 2, true, 10);
  EXPECT_EQ(kiln::testing::file_bytes(dir / "set0"), before0);
  EXPECT_EQ(kiln::testing::file_bytes(dir / "set1"), before1);
  RecordReader reader(dir / "set1");
  EXPECT_EQ(reader.num_rows(), 11u);
  EXPECT_TRUE(verify_records(dir / "set0").ok());
}

TEST(RecordAtomicity, UncommittedWriterRemovesItsTemporaries) {
  ScratchDir dir;
  {
    FileWriter writer(dir / "x", 3);
    writer.add_schema(testing::small_schema());
    writer.write_raw_data({testing::small_row(1)});
    EXPECT_EQ(dir.files().size(), 3u);
  }
  EXPECT_TRUE(dir.files().empty());
}

TEST(RecordAtomicity, ExistingFilesNeedOverwrite) {
  ScratchDir dir;
  testing::write_small_set(dir / "set", 5, 1);
  EXPECT_THROW(testing::write_small_set(dir / "set", 5, 1), FileError);
  testing::write_small_set(dir / "set", 9, 1, {.overwrite = true, .page_size = 4096});
  EXPECT_EQ(RecordReader(dir / "set").num_rows(), 9u);
}

TEST(RecordAtomicity, OverwriteWithFewerShardsRemovesTheOldOnes) {
  ScratchDir dir;
  testing::write_small_set(dir / "set", 20, 4);
  testing::write_small_set(dir / "set", 20, 2, {.overwrite = true, .page_size = 4096});
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"set0", "set1"}));
  EXPECT_EQ(RecordReader(dir / "set0").num_rows(), 20u);
}

TEST(RecordAtomicity, ShardsFromDifferentCommitsAreRefused) {
  ScratchDir dir;
  testing::write_small_set(dir / "set", 20, 2);
  auto old_shard1 = kiln::testing::file_bytes(dir / "set1");
  testing::write_small_set(dir / "set", 20, 2, {.overwrite = true, .page_size = 4096});
  testing::write_file(dir / "set1", old_shard1);  // as if a crash fell between the two renames
  try {
    RecordReader reader(dir / "set0");
    FAIL() << "a mixed set was accepted";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("different commits"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(verify_records(dir / "set0").ok());
}

TEST(RecordAtomicity, MissingSiblingsAreNamed) {
  ScratchDir dir;
  testing::write_small_set(dir / "set", 20, 4);
  ::unlink((dir / "set1").c_str());
  ::unlink((dir / "set3").c_str());
  try {
    RecordReader reader(dir / "set0");
    FAIL() << "a set with missing shards was opened";
  } catch (const FileError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("2 of them are missing"), std::string::npos) << m;
    EXPECT_NE(m.find(dir / "set1"), std::string::npos) << m;
    EXPECT_NE(m.find(dir / "set3"), std::string::npos) << m;
    EXPECT_EQ(m.find(dir / "set2"), std::string::npos) << m;
  }
  // The shards that are there can still be opened as an explicit list.
  RecordReader subset(std::vector<std::string>{dir / "set0", dir / "set2"});
  EXPECT_EQ(subset.num_rows(), 10u);
  auto report = verify_records(dir / "set2");
  EXPECT_EQ(report.problem_count, 2u);
}

}  // namespace
}  // namespace kiln::record::record_atomicity_test
