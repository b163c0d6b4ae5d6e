// `kiln bench comm`: started alone it runs itself on 2 ranks, times the collectives, and saves
// the alpha-beta model that kiln plan then says it plans with.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "testing/kiln_command.h"

namespace kiln::cli::bench_comm_command_test {
namespace {

using testing::run_kiln;

TEST(BenchCommCommand, MeasuresSavesAndThePlannerUsesIt) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kiln_bench_comm_test";
  std::filesystem::remove_all(dir);
  const std::string env = "KILN_CACHE_DIR=" + dir.string() + " ";
  const auto r = run_kiln("bench comm --repeats 2 --largest-mb 1", env);
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("mpirun -np 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("all_reduce ms"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1048576"), std::string::npos) << r.output;
  std::ifstream in(dir / "comm-model.json");
  ASSERT_TRUE(in) << r.output;
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_GE(j["alpha_s"].get<double>(), 0);
  EXPECT_GT(j["beta_s_per_byte"].get<double>(), 0);
  EXPECT_NE(j["description"].get<std::string>().find("2 ranks"), std::string::npos);
  const auto plan = run_kiln("plan --model mlp --devices 2", env);
  ASSERT_EQ(plan.status, 0) << plan.output;
  EXPECT_NE(plan.output.find("measured by `kiln bench comm`: 2 ranks"), std::string::npos)
      << plan.output;
  // A damaged file is named in the error, never read as numbers.
  std::ofstream(dir / "comm-model.json") << "{\"alpha_s\": -1, \"beta_s_per_byte\": 1e-9}";
  const auto bad = run_kiln("plan --model mlp --devices 2", env);
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("comm-model.json: field 'alpha_s' is -1"), std::string::npos)
      << bad.output;
  std::filesystem::remove_all(dir);
}

TEST(BenchCommCommand, BadFlagsAreClearErrors) {
  for (const char* args :
       {"bench comm -n 1", "bench comm --repeats 0", "bench comm --largest-mb 0", "bench"}) {
    const auto r = run_kiln(args);
    ASSERT_TRUE(r.exited) << args;
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace kiln::cli::bench_comm_command_test
