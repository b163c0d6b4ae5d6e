#include "kiln/profile/recommendations.h"

#include <cstdio>

namespace kiln::profile {
namespace {

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %%", share * 100);
  return buf;
}

std::string ms(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", us / 1000);
  return buf;
}

double phase_share(const StepRow& mean, train::StepPhase phase) {
  return mean.duration_us > 0 ? mean.phase_us[size_t(phase)] / mean.duration_us : 0;
}

// The last pipeline verdict the run recorded (diagnose()'s bottleneck and advice).
std::pair<std::string, std::string> pipeline_verdict(const ProfileData& data) {
  if (!data.profile.contains("pipeline") || data.profile["pipeline"].empty()) return {};
  const nlohmann::json& stats = data.profile["pipeline"].back()["stats"];
  return {stats.value("bottleneck", ""), stats.value("advice", "")};
}

}  // namespace

std::vector<Recommendation> recommend(const ProfileData& data) {
  std::vector<Recommendation> out;
  const StepRow mean = data.steady_mean();
  const double wait = phase_share(mean, train::StepPhase::data_wait);
  if (wait > kDataWaitShare) {
    auto [bottleneck, advice] = pipeline_verdict(data);
    std::string reason = "waiting for data takes " + percent(wait) + " of the step (" +
                         ms(mean.phase_us[size_t(train::StepPhase::data_wait)]) + " of " +
                         ms(mean.duration_us) + ")";
    if (!bottleneck.empty()) reason += "; the pipeline's slowest stage is " + bottleneck;
    if (!advice.empty()) reason += "; diagnose(): " + advice;
    out.push_back(
        {"Raise num_parallel_workers of the slow map stage (kiln data bench shows it), "
         "or convert many small image files to a record file (kiln convert)",
         reason});
  }
  if (data.compiles() > 1) {
    std::string reasons;
    for (const nlohmann::json& c : data.profile["compiles"]) {
      if (c.value("compiles", 0) > 1)
        reasons += (reasons.empty() ? "" : "; ") + c.value("reason", "");
    }
    out.push_back({"Use batch(..., drop_remainder=True) so every batch has one shape",
                   "the training step was compiled " + std::to_string(data.compiles()) +
                       " times: " + reasons});
  }
  if (data.eager && !data.graph && !data.steps.empty()) {
    out.push_back({"Try GRAPH_MODE (kiln train --mode graph, or set_context(mode=GRAPH_MODE))",
                   "every step ran op by op (" + std::to_string(data.launches) +
                       " eager launches); a compiled step fuses ops and plans its memory once. "
                       "Profile both to measure the gain for this model"});
  }
  const double callbacks = phase_share(mean, train::StepPhase::callbacks);
  if (callbacks > 0.05) {
    out.push_back({"Make callbacks cheaper (print less often, checkpoint less often)",
                   "callbacks take " + percent(callbacks) + " of the step"});
  }
  const double communication = phase_share(mean, train::StepPhase::communication);
  if (communication > 0.2) {
    out.push_back(
        {"Raise --bucket-cap-mb or the per-rank batch size",
         "waiting for the gradients' all-reduce takes " + percent(communication) + " of the step"});
  }
  if (!data.ops.empty() && data.op_total_us > 0 && data.ops[0].total_us / data.op_total_us > 0.4) {
    const OpRow& top = data.ops[0];
    out.push_back({"Look at " + top.name + " first",
                   "one kind of launch (" + top.name + " " + top.shapes + ") takes " +
                       percent(top.total_us / data.op_total_us) + " of all op time"});
  }
  return out;
}

}  // namespace kiln::profile
