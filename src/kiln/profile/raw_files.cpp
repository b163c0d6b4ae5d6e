#include "kiln/profile/raw_files.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "kiln/profile/files.h"

namespace kiln::profile {
namespace {

using nlohmann::json;

// Microseconds since the profiler started (the trace format's unit).
double us(int64_t ns, int64_t start_ns) {
  return double(ns - start_ns) / 1000.0;
}

json complete_event(const std::string& name, const char* category, int pid, uint32_t thread,
                    int64_t begin_ns, int64_t end_ns, int64_t start_ns) {
  return {{"name", name},
          {"cat", category},
          {"ph", "X"},
          {"pid", pid},
          {"tid", thread},
          {"ts", us(begin_ns, start_ns)},
          {"dur", double(end_ns - begin_ns) / 1000.0}};
}

// Names the op each allocator event happened in: the innermost launch on its thread whose
// interval holds it; else the step phase it fell in ("between ops (backward)"), or the data
// pipeline for threads that launched nothing then.
class AllocationAttribution {
 public:
  explicit AllocationAttribution(const Collection& c) : c_(c) {
    for (size_t i = 0; i < c.ops.size(); ++i) by_thread_[c.ops[i].thread].push_back(i);
    for (auto& [thread, list] : by_thread_) {
      std::sort(list.begin(), list.end(), [&](size_t a, size_t b) {
        const OpEvent &x = c.ops[a], &y = c.ops[b];
        return x.begin_ns != y.begin_ns ? x.begin_ns < y.begin_ns : x.end_ns > y.end_ns;
      });
    }
    phases_ = c.phases;
    std::sort(phases_.begin(), phases_.end(),
              [](const PhaseEvent& a, const PhaseEvent& b) { return a.begin_ns < b.begin_ns; });
  }

  std::string op_of(const AllocationEvent& e) const {
    auto found = by_thread_.find(e.thread);
    if (found != by_thread_.end()) {
      const std::vector<size_t>& list = found->second;
      // The last launch starting at or before the event; walk back over the ones that ended.
      auto it = std::upper_bound(list.begin(), list.end(), e.at_ns,
                                 [&](int64_t at, size_t i) { return at < c_.ops[i].begin_ns; });
      for (int steps = 0; it != list.begin() && steps < 8; ++steps) {
        --it;
        const OpEvent& op = c_.ops[*it];
        if (op.end_ns >= e.at_ns) return c_.signatures[op.signature].name;
      }
    }
    if (e.thread != 0) return "data pipeline or other thread";
    auto p =
        std::upper_bound(phases_.begin(), phases_.end(), e.at_ns,
                         [](int64_t at, const PhaseEvent& phase) { return at < phase.begin_ns; });
    if (p != phases_.begin() && std::prev(p)->end_ns >= e.at_ns) {
      return "between ops (" + std::string(train::step_phase_name(std::prev(p)->phase)) + ")";
    }
    return "outside the steps";
  }

 private:
  const Collection& c_;
  std::map<uint32_t, std::vector<size_t>> by_thread_;
  std::vector<PhaseEvent> phases_;
};

void add_pipeline_counters(const Collection& c, int pid, json& events) {
  const PipelineSample* previous = nullptr;
  for (const PipelineSample& p : c.pipeline) {
    events.push_back({{"name", "data pipeline"},
                      {"ph", "C"},
                      {"pid", pid},
                      {"ts", us(p.at_ns, c.start_ns)},
                      {"args",
                       {{"consumer_wait_s", p.stats.consumer_wait_s},
                        {"rows_consumed", p.stats.rows_consumed}}}});
    // Each stage's share of its threads' time since the last sample, and its queue now.
    const double wall = previous ? p.stats.wall_s - previous->stats.wall_s : p.stats.wall_s;
    for (size_t i = 0; i < p.stats.stages.size(); ++i) {
      const data::StageStats& st = p.stats.stages[i];
      const bool same = previous && i < previous->stats.stages.size() &&
                        previous->stats.stages[i].name == st.name;
      const data::StageStats before = same ? previous->stats.stages[i] : data::StageStats{};
      const double thread_s = std::max(wall, 1e-9) * std::max(st.workers, 1);
      events.push_back(
          {{"name", "pipeline: " + st.name},
           {"ph", "C"},
           {"pid", pid},
           {"ts", us(p.at_ns, c.start_ns)},
           {"args",
            {{"busy", (st.busy_s - before.busy_s) / thread_s},
             {"waiting",
              (st.wait_in_s + st.wait_out_s - before.wait_in_s - before.wait_out_s) / thread_s},
             {"queue_blocks", st.queue_blocks}}}});
    }
    previous = &p;
  }
}

json trace_json(const Collection& c) {
  const int pid = c.rank;
  json events = json::array();
  events.push_back(
      {{"name", "process_name"},
       {"ph", "M"},
       {"pid", pid},
       {"args",
        {{"name", c.ranks > 1 ? "kiln rank " + std::to_string(c.rank) : std::string("kiln")}}}});
  for (int t = 0; t < std::max(c.threads, 1); ++t) {
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", pid},
         {"tid", t},
         {"args",
          {{"name", t == 0 ? std::string("training loop") : "thread " + std::to_string(t)}}}});
  }
  for (const StepEvent& s : c.steps) {
    json e = complete_event("step " + std::to_string(s.global_step), "step", pid, 0, s.begin_ns,
                            s.end_ns, c.start_ns);
    e["args"] = {{"global_step", s.global_step}, {"batch_size", s.batch_size}};
    events.push_back(std::move(e));
  }
  for (const PhaseEvent& p : c.phases) {
    events.push_back(complete_event(std::string(train::step_phase_name(p.phase)), "phase", pid, 0,
                                    p.begin_ns, p.end_ns, c.start_ns));
  }
  for (const OpEvent& o : c.ops) {
    const OpSignature& s = c.signatures[o.signature];
    json e = complete_event(s.name, s.mode == "graph" ? "launch" : "op", pid, o.thread, o.begin_ns,
                            o.end_ns, c.start_ns);
    json args = {{"mode", s.mode},       {"shapes", s.shapes}, {"layout", s.layout},
                 {"launch", s.launch},   {"kernel", s.kernel}, {"dtype", s.dtype},
                 {"threads", s.threads}, {"flops", s.flops},   {"bytes", s.bytes}};
    if (s.node >= 0) {
      args["node"] = s.node;
      args["graph"] = s.graph;
    }
    e["args"] = std::move(args);
    events.push_back(std::move(e));
  }
  const AllocationAttribution attribution(c);
  for (const AllocationEvent& a : c.allocations) {
    events.push_back(
        {{"name", "[memory]"},
         {"cat", "memory"},
         {"ph", "i"},
         {"s", "t"},
         {"pid", pid},
         {"tid", a.thread},
         {"ts", us(a.at_ns, c.start_ns)},
         {"args",
          {{"bytes", a.bytes}, {"in_use_bytes", a.in_use_bytes}, {"op", attribution.op_of(a)}}}});
  }
  // The bytes in use: after every allocator event where they were recorded, else at step ends.
  std::vector<MemorySample> in_use = c.memory;
  for (const AllocationEvent& a : c.allocations) in_use.push_back({a.at_ns, a.in_use_bytes, 0});
  std::sort(in_use.begin(), in_use.end(),
            [](const MemorySample& a, const MemorySample& b) { return a.at_ns < b.at_ns; });
  for (const MemorySample& m : in_use) {
    events.push_back({{"name", "memory"},
                      {"ph", "C"},
                      {"pid", pid},
                      {"ts", us(m.at_ns, c.start_ns)},
                      {"args", {{"in_use_bytes", m.in_use_bytes}}}});
  }
  add_pipeline_counters(c, pid, events);
  for (const CompileEvent& ce : c.compiles) {
    events.push_back({{"name", "compiled graph " + std::to_string(ce.compiles)},
                      {"cat", "compile"},
                      {"ph", "i"},
                      {"s", "p"},
                      {"pid", pid},
                      {"tid", 0},
                      {"ts", us(ce.at_ns, c.start_ns)},
                      {"args", {{"reason", ce.reason}, {"report", ce.report}}}});
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

json timings_json(const std::vector<StepTiming>& timings) {
  json out = json::array();
  for (const StepTiming& t : timings) {
    out.push_back({{"setting", t.setting}, {"ms", t.ms}, {"profiled", t.profiled}});
  }
  return out;
}

json peaks_json(const ops::MachinePeaks& p) {
  return {{"cpu", p.cpu},
          {"threads", p.threads},
          {"f32_gflops", p.f32_gflops},
          {"bf16_gflops", p.bf16_gflops},
          {"memory_gbps", p.memory_gbps},
          {"matmul_kernel", p.matmul_kernel},
          {"load_average", p.load_average},
          {"measured_at", p.measured_at},
          {"source", p.source}};
}

json profile_json(const Collection& c, const std::vector<ops::MachinePeaks>& peaks) {
  json compiles = json::array();
  for (const CompileEvent& ce : c.compiles) {
    json buffers = json::array();
    for (const PlanBuffer& b : ce.buffers) {
      buffers.push_back({b.offset, b.bytes, b.first, b.last, b.holds});
    }
    compiles.push_back({{"at_us", us(ce.at_ns, c.start_ns)},
                        {"compiles", ce.compiles},
                        {"graph", ce.graph},
                        {"reason", ce.reason},
                        {"report", ce.report},
                        {"counts", ce.counts},
                        {"graph_text", ce.graph_text},
                        {"graph_dot", ce.graph_dot},
                        {"traced_graph_text", ce.traced_text},
                        {"traced_graph_dot", ce.traced_dot},
                        {"plan",
                         {{"columns", {"offset", "bytes", "first", "last", "holds"}},
                          {"buffers", std::move(buffers)},
                          {"node_positions", ce.node_positions}}}});
  }
  json pipeline = json::array();
  for (const PipelineSample& p : c.pipeline) {
    // diagnose()'s JSON; a number it could not write (NaN) leaves the sample without stats.
    json stats = json::parse(p.stats.to_json(), nullptr, /*allow_exceptions=*/false);
    if (stats.is_discarded()) stats = json::object();
    pipeline.push_back({{"at_us", us(p.at_ns, c.start_ns)}, {"stats", std::move(stats)}});
  }
  json machine = nullptr;
  json by_threads = json::array();
  for (const ops::MachinePeaks& p : peaks) by_threads.push_back(peaks_json(p));
  if (!peaks.empty()) machine = peaks_json(peaks.front());
  return {{"format", "kiln profile 1"},
          {"duration_us", us(c.stop_ns, c.start_ns)},
          {"rank", c.rank},
          {"ranks", c.ranks},
          {"annotations", c.annotations},
          {"allocator_peak_bytes", c.allocator_peak_bytes},
          {"allocator_events", c.allocations.size()},
          {"threads", c.threads},
          {"machine_peaks", std::move(machine)},
          {"machine_peaks_by_threads", std::move(by_threads)},
          {"amp_race", timings_json(c.amp_race)},
          {"comparisons", timings_json(c.comparisons)},
          {"compiles", std::move(compiles)},
          {"pipeline", std::move(pipeline)}};
}

}  // namespace

void write_raw_files(const Collection& collection, const std::string& dir,
                     const std::vector<ops::MachinePeaks>& peaks) {
  write_file_atomically(dir + "/" + kTraceFile, trace_json(collection).dump());
  write_file_atomically(dir + "/" + kProfileFile, profile_json(collection, peaks).dump(1));
}

}  // namespace kiln::profile
