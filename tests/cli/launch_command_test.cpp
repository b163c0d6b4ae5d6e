#include "kiln/cli/launch_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "kiln/core/error.h"
#include "kiln/core/threads.h"

namespace kiln::cli::launch_command_test {
namespace {

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string env(const LaunchPlan& p, const std::string& name) {
  for (const auto& [k, v] : p.environment) {
    if (k == name) return v;
  }
  return "";
}

TEST(Launch, RanksShareTheCoresEachBoundToItsOwn) {
  LaunchPlan p =
      plan_launch({.ranks = 1, .command = {"train", "--parallel-mode", "data"}}, "/bin/kiln");
  EXPECT_EQ(p.argv[0], "mpirun");
  EXPECT_EQ(p.argv[1], "-np");
  EXPECT_EQ(p.argv[2], "1");
  EXPECT_TRUE(has(p.argv, "slot:PE=" + std::to_string(available_cores())));
  EXPECT_TRUE(has(p.argv, "core"));
  EXPECT_EQ(env(p, "OMP_NUM_THREADS"), std::to_string(available_cores()));
  EXPECT_EQ(env(p, "OMPI_MCA_btl_vader_single_copy_mechanism"), "none");
  // The kiln binary and its command come last, unchanged.
  ASSERT_GE(p.argv.size(), 4u);
  EXPECT_EQ(p.argv[p.argv.size() - 4], "/bin/kiln");
  EXPECT_EQ(p.argv.back(), "data");
  if (geteuid() == 0) EXPECT_EQ(env(p, "OMPI_ALLOW_RUN_AS_ROOT"), "1");
  EXPECT_NE(p.str().find("mpirun -np 1"), std::string::npos);
}

TEST(Launch, MoreRanksThanCoresOversubscribeUnbound) {
  LaunchPlan p = plan_launch({.ranks = available_cores() + 1, .command = {"train"}}, "/bin/kiln");
  EXPECT_TRUE(has(p.argv, "--oversubscribe"));
  EXPECT_TRUE(has(p.argv, "none"));
  EXPECT_EQ(env(p, "OMP_NUM_THREADS"), "1");
}

TEST(Launch, HostfileAndTcp) {
  const std::string hosts = ::testing::TempDir() + "kiln_hosts";
  std::ofstream(hosts) << "node1 slots=2\nnode2 slots=2\n";
  LaunchPlan p =
      plan_launch({.ranks = 4, .hostfile = hosts, .tcp = true, .command = {"train"}}, "/bin/kiln");
  EXPECT_TRUE(has(p.argv, "--hostfile"));
  EXPECT_TRUE(has(p.argv, hosts));
  EXPECT_TRUE(has(p.argv, "tcp,self"));
  EXPECT_EQ(env(p, "OMP_NUM_THREADS"), "1");
  EXPECT_THROW(plan_launch({.ranks = 2, .hostfile = hosts + ".missing", .command = {"train"}}, "k"),
               FileError);
}

TEST(Launch, BadRequestsAreErrors) {
  EXPECT_THROW(plan_launch({.ranks = 0, .command = {"train"}}, "k"), Error);
  EXPECT_THROW(plan_launch({.ranks = 2}, "k"), Error);
  EXPECT_THROW(plan_launch({.ranks = 2, .threads_per_rank = -1, .command = {"train"}}, "k"), Error);
}

}  // namespace
}  // namespace kiln::cli::launch_command_test
