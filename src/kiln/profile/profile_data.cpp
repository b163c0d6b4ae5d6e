#include "kiln/profile/profile_data.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "kiln/core/error.h"
#include "kiln/profile/files.h"
#include "kiln/profile/raw_files.h"

namespace kiln::profile {
namespace {

using nlohmann::json;

json parse_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw FileError("profiler: " + path + " is not valid JSON (" + e.what() +
                    "); rerun the profiled job to write it again");
  }
}

int phase_by_name(const std::string& name) {
  for (int p = 0; p < train::kNumStepPhases; ++p) {
    if (train::step_phase_name(train::StepPhase(p)) == name) return p;
  }
  return -1;
}

DType dtype_from_name(const std::string& name) {
  for (DType d : {DType::bf16, DType::f16}) {
    if (name == dtype_name(d)) return d;
  }
  return DType::f32;
}

std::optional<ops::MachinePeaks> peaks_of(const json& j) {
  if (!j.is_object()) return std::nullopt;
  ops::MachinePeaks p;
  p.cpu = j.value("cpu", "");
  p.threads = j.value("threads", 0);
  p.f32_gflops = j.value("f32_gflops", 0.0);
  p.bf16_gflops = j.value("bf16_gflops", 0.0);
  p.memory_gbps = j.value("memory_gbps", 0.0);
  p.matmul_kernel = j.value("matmul_kernel", "");
  p.load_average = j.value("load_average", 0.0);
  p.measured_at = j.value("measured_at", "");
  p.source = j.value("source", "");
  if (p.f32_gflops <= 0 || p.memory_gbps <= 0) return std::nullopt;
  return p;
}

struct PhaseSpan {
  int phase;
  double begin_us, duration_us;
};

// Each phase goes to the step whose interval holds its start.
void assign_phases(std::vector<StepRow>& steps, std::vector<PhaseSpan>& phases) {
  std::sort(phases.begin(), phases.end(),
            [](const PhaseSpan& a, const PhaseSpan& b) { return a.begin_us < b.begin_us; });
  size_t s = 0;
  for (const PhaseSpan& p : phases) {
    while (s < steps.size() && steps[s].begin_us + steps[s].duration_us <= p.begin_us) ++s;
    if (s == steps.size()) break;
    if (p.begin_us >= steps[s].begin_us) steps[s].phase_us[size_t(p.phase)] += p.duration_us;
  }
}

}  // namespace

double OpRow::share_of_peak(const ops::MachinePeaks& peaks) const {
  if (flops <= 0 || bytes <= 0 || total_us <= 0) return 0;
  const double ceiling = peaks.ceiling_gflops(flops_per_byte(), dtype_from_name(dtype));
  return ceiling > 0 ? gflops_per_s() / ceiling : 0;
}

double StepRow::other_us() const {
  double phases = 0;
  for (double us : phase_us) phases += us;
  return duration_us - phases;
}

StepRow ProfileData::steady_mean() const {
  StepRow mean;
  const size_t first = steps.size() > 1 ? 1 : 0;
  const double n = double(steps.size() - first);
  if (n <= 0) return mean;
  for (size_t i = first; i < steps.size(); ++i) {
    mean.duration_us += steps[i].duration_us / n;
    mean.batch_size = steps[i].batch_size;
    for (size_t p = 0; p < mean.phase_us.size(); ++p) mean.phase_us[p] += steps[i].phase_us[p] / n;
  }
  return mean;
}

double ProfileData::steady_images_per_s() const {
  const StepRow mean = steady_mean();
  return mean.duration_us > 0 ? double(mean.batch_size) / mean.duration_us * 1e6 : 0;
}

const ops::MachinePeaks* ProfileData::peaks_for(int threads) const {
  for (const ops::MachinePeaks& p : peaks_by_threads) {
    if (p.threads == threads) return &p;
  }
  return peaks ? &*peaks : nullptr;
}

double ProfileData::share_of_peak(const OpRow& row) const {
  const ops::MachinePeaks* p = peaks_for(row.threads);
  return p ? row.share_of_peak(*p) : 0;
}

int ProfileData::compiles() const {
  return profile.contains("compiles") ? int(profile["compiles"].size()) : 0;
}

ProfileData load_profile(const std::string& dir) {
  ProfileData data;
  data.dir = dir;
  const std::string trace_path = dir + "/" + kTraceFile;
  const json trace = parse_file(trace_path);
  data.profile = parse_file(dir + "/" + kProfileFile);
  if (!trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    throw FileError("profiler: " + trace_path + " has no traceEvents array");
  }
  std::map<std::tuple<std::string, std::string, std::string, std::string, std::string>, size_t>
      row_of;
  std::vector<PhaseSpan> phases;
  try {
    for (const json& e : trace["traceEvents"]) {
      const std::string ph = e.value("ph", "");
      const std::string cat = e.value("cat", "");
      if (ph == "X" && (cat == "op" || cat == "launch")) {
        const json& args = e.at("args");
        const std::string name = e.at("name");
        auto key = std::make_tuple(name, args.value("mode", ""), args.value("kernel", ""),
                                   args.value("shapes", ""), args.value("layout", ""));
        auto [it, added] = row_of.emplace(key, data.ops.size());
        if (added) {
          data.ops.push_back({.name = name,
                              .mode = std::get<1>(key),
                              .kernel = std::get<2>(key),
                              .shapes = std::get<3>(key),
                              .layout = std::get<4>(key),
                              .dtype = args.value("dtype", ""),
                              .threads = args.value("threads", 1)});
        }
        OpRow& row = data.ops[it->second];
        const double dur = e.at("dur");
        ++row.calls;
        row.total_us += dur;
        row.flops += args.value("flops", 0.0);
        row.bytes += args.value("bytes", 0.0);
        data.op_total_us += dur;
        ++data.launches;
        data.op_names.insert(name);
        (cat == "op" ? data.eager : data.graph) = true;
        if (args.contains("graph")) {
          const double ts = e.at("ts");
          data.graph_launches.push_back(
              {args.at("graph").get<uint64_t>(), args.value("node", -1), ts, ts + dur});
        }
      } else if (ph == "X" && cat == "step") {
        StepRow row;
        row.global_step = e.at("args").value("global_step", int64_t(0));
        row.batch_size = e.at("args").value("batch_size", int64_t(0));
        row.begin_us = e.at("ts");
        row.duration_us = e.at("dur");
        data.steps.push_back(row);
      } else if (ph == "X" && cat == "phase") {
        const int p = phase_by_name(e.at("name"));
        if (p >= 0) phases.push_back({p, e.at("ts"), e.at("dur")});
      } else if (ph == "C" && e.value("name", "") == "memory") {
        data.memory.push_back(
            {e.at("ts"), e.at("args").at("in_use_bytes"), e.at("args").value("peak_bytes", 0.0)});
      } else if (ph == "i" && cat == "memory") {
        const json& args = e.at("args");
        data.allocations.push_back({e.at("ts"), e.value("tid", 0), args.at("bytes"),
                                    args.at("in_use_bytes"), args.value("op", "")});
      }
    }
  } catch (const json::exception& e) {
    throw FileError("profiler: " + trace_path + " holds an event without its fields (" + e.what() +
                    ")");
  }
  std::sort(data.ops.begin(), data.ops.end(),
            [](const OpRow& a, const OpRow& b) { return a.total_us > b.total_us; });
  std::sort(data.steps.begin(), data.steps.end(),
            [](const StepRow& a, const StepRow& b) { return a.begin_us < b.begin_us; });
  std::sort(data.memory.begin(), data.memory.end(),
            [](const MemoryPoint& a, const MemoryPoint& b) { return a.at_us < b.at_us; });
  std::stable_sort(
      data.allocations.begin(), data.allocations.end(),
      [](const AllocationRow& a, const AllocationRow& b) { return a.at_us < b.at_us; });
  std::sort(data.graph_launches.begin(), data.graph_launches.end(),
            [](const LaunchSpan& a, const LaunchSpan& b) { return a.begin_us < b.begin_us; });
  if (data.profile.contains("machine_peaks")) data.peaks = peaks_of(data.profile["machine_peaks"]);
  if (data.profile.contains("machine_peaks_by_threads")) {
    for (const json& j : data.profile["machine_peaks_by_threads"]) {
      if (std::optional<ops::MachinePeaks> p = peaks_of(j)) data.peaks_by_threads.push_back(*p);
    }
  }
  assign_phases(data.steps, phases);
  return data;
}

}  // namespace kiln::profile
