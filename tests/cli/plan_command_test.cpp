// `kiln plan`: AUTO_PARALLEL's plan for any number of devices with no ranks running, as text and
// as JSON, within the issue's time at 1,024 devices, and clear errors for bad flags and limits
// nothing fits.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "testing/kiln_command.h"

namespace kiln::cli::plan_command_test {
namespace {

using testing::run_kiln;

// The MLP's plan on 4 devices splits layers.3's contracted dimension: its partial sums are
// reduce-scattered into the batch split that follows, a redistribution printed by default.
TEST(PlanCommand, PrintsEachOpsStrategyTheRedistributionsAndTheStepNextToDataParallelism) {
  const auto r = run_kiln("plan --model mlp --devices 4 --batch-size 64");
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* part :
       {"AUTO_PARALLEL plan for 4 devices (search dynamic_programming, optimal", "eliminations:",
        "matmul %", "parameters:", "layers.1.weight [1024, 784]", "this plan   data parallel",
        "communication", "memory", "redistributions rank 0 inserts in the forward",
        "reduce_scatter dim 0 over 4 ranks", "redistributions, ~"}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  }
  EXPECT_EQ(r.output.find("Sharding plan for"), std::string::npos) << r.output;
}

TEST(PlanCommand, NoRedistributionsHidesThemAndLayoutsAddsEveryOpsLayouts) {
  const auto hidden = run_kiln("plan --model mlp --devices 4 --batch-size 64 --no-redistributions");
  ASSERT_EQ(hidden.status, 0) << hidden.output;
  EXPECT_NE(hidden.output.find("AUTO_PARALLEL plan for 4 devices"), std::string::npos);
  EXPECT_EQ(hidden.output.find("redistributions rank 0 inserts"), std::string::npos)
      << hidden.output;
  const auto layouts = run_kiln("plan --model mlp --devices 4 --batch-size 64 --layouts");
  ASSERT_EQ(layouts.status, 0) << layouts.output;
  EXPECT_NE(layouts.output.find("Sharding plan for 4 ranks (redistributions as rank 0 runs them)"),
            std::string::npos)
      << layouts.output;
  EXPECT_NE(layouts.output.find("reduce_scatter dim 0 over ranks [0, 1, 2, 3]"), std::string::npos)
      << layouts.output;
}

TEST(PlanCommand, JsonListsTheRedistributions) {
  const auto r = run_kiln("plan --model mlp --devices 4 --batch-size 64 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  ASSERT_TRUE(j["redistributions"].is_array()) << j.dump(2);
  bool reduce_scatter = false;
  double sum_us = 0;
  for (const auto& r : j["redistributions"]) {
    EXPECT_FALSE(r["op"].get<std::string>().empty());
    EXPECT_FALSE(r["value"].get<std::string>().empty());
    ASSERT_FALSE(r["steps"].empty()) << r.dump();
    for (const auto& s : r["steps"]) {
      reduce_scatter = reduce_scatter || s["step"] == "reduce_scatter dim 0 over 4 ranks";
    }
    sum_us += r["estimate_us"].get<double>();
  }
  EXPECT_TRUE(reduce_scatter) << j["redistributions"].dump(2);
  EXPECT_GT(sum_us, 0);
  EXPECT_NEAR(j["redistribution_forward_ms"].get<double>(), sum_us / 1e3, 1e-9);
}

// The issue's spelling, --memory-limit MB, and --memory-limit-mb mean the same.
TEST(PlanCommand, MemoryLimitTakesMibUnderEitherName) {
  const std::string plan = "plan --model mlp --devices 4 --batch-size 64 --json ";
  const auto a = run_kiln(plan + "--memory-limit 8");
  const auto b = run_kiln(plan + "--memory-limit-mb 8");
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  const nlohmann::json ja = nlohmann::json::parse(a.output.substr(a.output.find('{')));
  const nlohmann::json jb = nlohmann::json::parse(b.output.substr(b.output.find('{')));
  EXPECT_EQ(ja["memory_limit_mib"], 8);
  EXPECT_EQ(jb["memory_limit_mib"], 8);
  EXPECT_TRUE(ja["fits"].get<bool>());
  EXPECT_LE(ja["predicted"]["memory_mib"].get<double>(), 8);
  EXPECT_EQ(ja["parameters"], jb["parameters"]);
}

TEST(PlanCommand, JsonHoldsThePredictionAndEveryOp) {
  const auto r = run_kiln("plan --model lenet --devices 2 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["devices"], 2);
  EXPECT_EQ(j["search"], "dynamic_programming");
  EXPECT_TRUE(j["optimal"].get<bool>());
  EXPECT_GT(j["predicted"]["step_ms"].get<double>(), 0);
  EXPECT_LE(j["predicted"]["step_ms"].get<double>(),
            j["data_parallel"]["step_ms"].get<double>() * (1 + 1e-9));
  EXPECT_GT(j["ops"].size(), 5u);
  for (const auto& op : j["ops"]) {
    EXPECT_FALSE(op["strategy"].get<std::string>().empty());
    EXPECT_FALSE(op["what"].get<std::string>().empty());
  }
  EXPECT_TRUE(j["parameters"].contains("features.0.weight")) << j["parameters"].dump();
}

// Estimated op times by default (the cluster planned for need not be this machine); measured ones
// when asked, which the cost model names and the predicted compute shows.
TEST(PlanCommand, OpTimesAreEstimatedUnlessMeasuredIsAsked) {
  const auto estimated = run_kiln("plan --model lenet --devices 2 --json");
  const auto measured = run_kiln("plan --model lenet --devices 2 --json --op-times measured");
  ASSERT_EQ(estimated.status, 0) << estimated.output;
  ASSERT_EQ(measured.status, 0) << measured.output;
  const nlohmann::json e =
      nlohmann::json::parse(estimated.output.substr(estimated.output.find('{')));
  const nlohmann::json m = nlohmann::json::parse(measured.output.substr(measured.output.find('{')));
  EXPECT_EQ(e["cost_model"].get<std::string>().find("timed"), std::string::npos) << e["cost_model"];
  EXPECT_NE(m["cost_model"].get<std::string>().find("forward and backward timed"),
            std::string::npos)
      << m["cost_model"];
  const double measured_ms = m["predicted"]["compute_ms"].get<double>();
  const double estimated_ms = e["predicted"]["compute_ms"].get<double>();
  EXPECT_GT(measured_ms, 0);
  EXPECT_GT(std::abs(measured_ms - estimated_ms), 0.01 * estimated_ms)
      << "the measured times were not used";
}

// The search alone is measured (search_ms); the process also traces the model and measures the
// machine. The issue's bound at 1,024 devices is 10 s.
TEST(PlanCommand, PlansATransformerForThousandTwentyFourDevicesWithinTenSeconds) {
  const auto r =
      run_kiln("plan --model gpt --devices 1024 --batch-size 1024 --optimizer adam --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_LT(j["search_ms"].get<double>(), 10000);
  EXPECT_EQ(j["devices"], 1024);
  EXPECT_GT(j["strategies_weighed"].get<int64_t>(), 1000);
}

// The issue's bounds for a graph of ResNet-50's size: under 1 s at 8 devices, 10 s at 1,024.
TEST(PlanCommand, PlansResNet50WithinTheIssuesBounds) {
  for (const auto& [devices, bound_ms] : {std::pair{8, 1000.0}, std::pair{1024, 10000.0}}) {
    const auto r = run_kiln(
        "plan --model resnet50 --batch-size 256 --image-size 224x224 "
        "--channels 3 --classes 1000 --json --devices " +
        std::to_string(devices));
    ASSERT_EQ(r.status, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_LT(j["search_ms"].get<double>(), bound_ms) << devices << " devices";
    EXPECT_TRUE(j["optimal"].get<bool>()) << devices << " devices";
    EXPECT_GT(j["ops"].size(), 150u);
  }
}

TEST(PlanCommand, EverySearchModePlans) {
  for (const char* search : {"recursive_programming", "sharding_propagation"}) {
    const auto r = run_kiln(std::string("plan --model gpt --devices 4 --search ") + search);
    ASSERT_EQ(r.status, 0) << search << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string("search ") + search), std::string::npos) << r.output;
  }
}

TEST(PlanCommand, BadFlagsAndLimitsNothingFitsAreClearErrors) {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c : {Case{"plan --model mlp --devices 0", "--devices"},
                        Case{"plan --model mlp --devices 2048", "--devices"},
                        Case{"plan --model mlp --devices 2 --search annealing", "--search"},
                        Case{"plan --model mlp --devices 2 --op-times guessed", "--op-times"},
                        Case{"plan --model nope --devices 2", "--model"},
                        Case{"plan --model mlp --devices 2 --memory-limit -3", "--memory-limit"},
                        Case{"plan --model mlp --devices 2 --memory-limit-mb -3", "--memory-limit"},
                        Case{"plan --model mlp --devices 4 --memory-limit 0.01",
                             "no plan for 4 devices fits the memory limit of 0.01 MiB"}}) {
    const auto r = run_kiln(c.args);
    ASSERT_TRUE(r.exited) << c.args;
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace kiln::cli::plan_command_test
