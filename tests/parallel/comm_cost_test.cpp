// The α-β model and its fit to measured collectives: timings made by a known model give it back,
// noise moves it little, and too few timings are refused.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/parallel/comm_cost.h"

namespace kiln::parallel::comm_cost_test {
namespace {

std::vector<CollectiveTiming> timings_of(const CommCostModel& m, int64_t ranks, double noise,
                                         uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  std::vector<CollectiveTiming> out;
  for (double bytes = 4096; bytes <= 64 << 20; bytes *= 4) {
    out.push_back({CollectiveTiming::Kind::all_reduce, bytes, ranks,
                   m.all_reduce(bytes, ranks) * jitter(gen)});
    out.push_back({CollectiveTiming::Kind::all_gather, bytes, ranks,
                   m.all_gather(bytes, ranks) * jitter(gen)});
  }
  return out;
}

TEST(CommCostModel, RingFormulas) {
  const CommCostModel m{.alpha_s = 1e-5, .beta_s_per_byte = 1e-9};
  EXPECT_DOUBLE_EQ(m.all_reduce(1000, 1), 0);
  EXPECT_DOUBLE_EQ(m.all_reduce(1000, 4), 6 * 1e-5 + 1.5 * 1000 * 1e-9);
  EXPECT_DOUBLE_EQ(m.all_gather(1000, 4), 3 * 1e-5 + 0.75 * 1000 * 1e-9);
  EXPECT_DOUBLE_EQ(m.reduce_scatter(1000, 4), m.all_gather(1000, 4));
}

TEST(CommCostModel, FitGivesBackTheModelThatMadeTheTimings) {
  for (int64_t ranks : {2, 4, 8}) {
    const CommCostModel truth{.alpha_s = 12e-6, .beta_s_per_byte = 0.4e-9};
    const CommCostModel exact = fit_comm_cost_model(timings_of(truth, ranks, 0, 1));
    EXPECT_NEAR(exact.alpha_s, truth.alpha_s, 1e-9 * truth.alpha_s);
    EXPECT_NEAR(exact.beta_s_per_byte, truth.beta_s_per_byte, 1e-9 * truth.beta_s_per_byte);
    const CommCostModel noisy = fit_comm_cost_model(timings_of(truth, ranks, 0.1, 2));
    EXPECT_NEAR(noisy.alpha_s, truth.alpha_s, 0.25 * truth.alpha_s);
    EXPECT_NEAR(noisy.beta_s_per_byte, truth.beta_s_per_byte, 0.25 * truth.beta_s_per_byte);
  }
}

TEST(CommCostModel, FitNeverGoesNegativeAndNeedsTwoSizes) {
  // Pure bandwidth: alpha fits to 0, not below.
  const CommCostModel bandwidth{.alpha_s = 0, .beta_s_per_byte = 1e-9};
  const CommCostModel fit = fit_comm_cost_model(timings_of(bandwidth, 2, 0.2, 3));
  EXPECT_GE(fit.alpha_s, 0);
  EXPECT_GT(fit.beta_s_per_byte, 0);
  EXPECT_THROW(fit_comm_cost_model({}), Error);
  EXPECT_THROW(fit_comm_cost_model({{CollectiveTiming::Kind::all_reduce, 4096, 2, 1e-5},
                                    {CollectiveTiming::Kind::all_gather, 4096, 2, 1e-5}}),
               Error);
}

}  // namespace
}  // namespace kiln::parallel::comm_cost_test
