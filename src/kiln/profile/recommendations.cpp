#include "kiln/profile/recommendations.h"

#include <cstdio>
#include <optional>

#include "kiln/profile/step_comparison.h"

namespace kiln::profile {
namespace {

using nlohmann::json;

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

std::string times(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", ratio);
  return buf;
}

double phase_share(const StepRow& mean, train::StepPhase phase) {
  return mean.duration_us > 0 ? mean.phase_us[size_t(phase)] / mean.duration_us : 0;
}

// The last pipeline verdict the run recorded (diagnose()'s bottleneck and advice).
std::pair<std::string, std::string> pipeline_verdict(const ProfileData& data) {
  if (!data.profile.contains("pipeline") || data.profile["pipeline"].empty()) return {};
  const json& stats = data.profile["pipeline"].back()["stats"];
  return {stats.value("bottleneck", ""), stats.value("advice", "")};
}

// A step comparison's milliseconds for `setting` (step_comparison.h), if it was timed.
std::optional<double> timed(const ProfileData& data, const std::string& setting) {
  if (!data.profile.contains("comparisons")) return std::nullopt;
  for (const json& t : data.profile["comparisons"]) {
    if (t.value("setting", "") == setting && t.value("ms", 0.0) > 0) return t.value("ms", 0.0);
  }
  return std::nullopt;
}

std::string annotation(const ProfileData& data, const std::string& key) {
  if (!data.profile.contains("annotations")) return "";
  return data.profile["annotations"].value(key, "");
}

// A setting measured faster than the profiled one by more than the noise of a few steps.
constexpr double kMeasuredGain = 1.05;

void data_wait_rule(const ProfileData& data, const StepRow& mean,
                    std::vector<Recommendation>& out) {
  const double wait = phase_share(mean, train::StepPhase::data_wait);
  if (wait <= kDataWaitShare) return;
  auto [bottleneck, advice] = pipeline_verdict(data);
  std::string reason = "waiting for data takes " + percent(wait) + " of the step (" +
                       ms(mean.phase_us[size_t(train::StepPhase::data_wait)]) + " of " +
                       ms(mean.duration_us) + ")";
  if (!bottleneck.empty()) reason += "; the pipeline's slowest stage is " + bottleneck;
  if (!advice.empty()) reason += "; diagnose(): " + advice;
  out.push_back(
      {"Raise num_parallel_workers of the slow map stage (kiln train --workers N; kiln data "
       "bench shows it), or convert many small image files to a record file (kiln convert)",
       reason});
}

void amp_rules(const ProfileData& data, std::vector<Recommendation>& out) {
  const std::string level = annotation(data, "amp level");
  const std::optional<double> profiled = timed(data, kProfiledSetting);
  if (const std::optional<double> o0 = timed(data, kAmpO0Setting); o0 && profiled) {
    if (*profiled > *o0) {
      out.push_back({(level.empty() ? std::string("Mixed precision") : level) +
                         " is slower than O0 for this model here: train at --amp-level O0",
                     "one training step took " + ms(*profiled * 1e3) + " at " +
                         (level.empty() ? "the profiled level" : level) + " and " + ms(*o0 * 1e3) +
                         " at O0 (median of interleaved steps, same batch)"});
    }
  }
  if (const std::optional<double> o2 = timed(data, kAmpO2Setting);
      o2 && profiled && *profiled > kMeasuredGain * *o2) {
    out.push_back({"Try --amp-level O2 (bf16): it is faster for this model here",
                   "one training step took " + ms(*o2 * 1e3) + " at O2 against " +
                       ms(*profiled * 1e3) + " at O0 (" + times(*profiled / *o2) + ")"});
  }
  // Graph mode's own race: the first graph with bf16 against the same step in fp32.
  if (data.profile.contains("amp_race") && data.profile["amp_race"].size() == 2) {
    const json& mixed = data.profile["amp_race"][0];
    const json& fp32 = data.profile["amp_race"][1];
    if (fp32.value("profiled", false)) {
      out.push_back(
          {"bf16 is slower than fp32 for this model here: the compiled step trained in fp32; "
           "--amp-level O0 skips the race",
           "the step with bf16 where it pays took " + ms(mixed.value("ms", 0.0) * 1e3) +
               " of CPU time, in fp32 " + ms(fp32.value("ms", 0.0) * 1e3)});
    }
  }
}

void mode_rules(const ProfileData& data, std::vector<Recommendation>& out) {
  const std::optional<double> profiled = timed(data, kProfiledSetting);
  if (data.eager && !data.graph && !data.steps.empty()) {
    const std::optional<double> graph = timed(data, kGraphSetting);
    const std::optional<double> fused = timed(data, kGraphFusionSetting);
    if (profiled && (graph || fused)) {
      const bool fusion_best = fused && (!graph || *fused < *graph);
      const double best = fusion_best ? *fused : *graph;
      if (*profiled > kMeasuredGain * best) {
        out.push_back(
            {std::string("Use GRAPH_MODE (kiln train --mode graph") +
                 (fusion_best ? " --graph-kernel on" : "") + "): " + times(*profiled / best) +
                 " faster for this model here",
             "one training step took " + ms(*profiled * 1e3) + " eagerly, " +
                 (graph ? ms(*graph * 1e3) + " in graph mode" : std::string()) +
                 (graph && fused ? ", " : "") +
                 (fused ? ms(*fused * 1e3) + " in graph mode with fusion" : std::string()) +
                 " (median of interleaved steps, same batch)"});
      }
    } else if (!profiled) {
      out.push_back({"Try GRAPH_MODE (kiln train --mode graph, or set_context(mode=GRAPH_MODE))",
                     "every step ran op by op (" + std::to_string(data.launches) +
                         " eager launches); a compiled step fuses ops and plans its memory "
                         "once. kiln train --profile times both steps and gives the gain"});
    }
  }
  if (const std::optional<double> fused = timed(data, kFusionSetting);
      fused && profiled && *profiled > kMeasuredGain * *fused) {
    out.push_back({"Turn on graph-kernel fusion (--graph-kernel on, enable_graph_kernel=True): " +
                       times(*profiled / *fused) + " faster for this model here",
                   "one compiled step took " + ms(*profiled * 1e3) + " without fusion, " +
                       ms(*fused * 1e3) + " with it"});
  }
}

}  // namespace

std::vector<Recommendation> recommend(const ProfileData& data) {
  std::vector<Recommendation> out;
  const StepRow mean = data.steady_mean();
  data_wait_rule(data, mean, out);
  if (data.compiles() > 1) {
    std::string reasons;
    for (const json& c : data.profile["compiles"]) {
      if (c.value("compiles", 0) > 1)
        reasons += (reasons.empty() ? "" : "; ") + c.value("reason", "");
    }
    out.push_back({"Use batch(..., drop_remainder=True) so every batch has one shape",
                   "the training step was compiled " + std::to_string(data.compiles()) +
                       " times: " + reasons});
  }
  mode_rules(data, out);
  amp_rules(data, out);
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
    std::string reason = "one kind of launch (" + top.name + " " + top.shapes + ", kernel " +
                         top.kernel + ") takes " + percent(top.total_us / data.op_total_us) +
                         " of all op time";
    if (data.peaks && top.flops > 0) {
      reason += " at " + percent(data.share_of_peak(top)) + " of its roofline ceiling";
    }
    out.push_back({"Look at " + top.name + " first", reason});
  }
  return out;
}

}  // namespace kiln::profile
