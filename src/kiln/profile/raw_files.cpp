#include "kiln/profile/raw_files.h"

#include <nlohmann/json.hpp>

#include "kiln/profile/files.h"

namespace kiln::profile {
namespace {

using nlohmann::json;

// Microseconds since the profiler started (the trace format's unit).
double us(int64_t ns, int64_t start_ns) {
  return double(ns - start_ns) / 1000.0;
}

json complete_event(const std::string& name, const char* category, uint32_t thread,
                    int64_t begin_ns, int64_t end_ns, int64_t start_ns) {
  return {{"name", name},
          {"cat", category},
          {"ph", "X"},
          {"pid", 0},
          {"tid", thread},
          {"ts", us(begin_ns, start_ns)},
          {"dur", double(end_ns - begin_ns) / 1000.0}};
}

json trace_json(const Collection& c) {
  json events = json::array();
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", "kiln"}}}});
  for (int t = 0; t < std::max(c.threads, 1); ++t) {
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", t},
         {"args",
          {{"name", t == 0 ? std::string("training loop") : "thread " + std::to_string(t)}}}});
  }
  for (const StepEvent& s : c.steps) {
    json e = complete_event("step " + std::to_string(s.global_step), "step", 0, s.begin_ns,
                            s.end_ns, c.start_ns);
    e["args"] = {{"global_step", s.global_step}, {"batch_size", s.batch_size}};
    events.push_back(std::move(e));
  }
  for (const PhaseEvent& p : c.phases) {
    events.push_back(complete_event(std::string(train::step_phase_name(p.phase)), "phase", 0,
                                    p.begin_ns, p.end_ns, c.start_ns));
  }
  for (const OpEvent& o : c.ops) {
    const OpSignature& s = c.signatures[o.signature];
    json e = complete_event(s.name, s.mode == "graph" ? "launch" : "op", o.thread, o.begin_ns,
                            o.end_ns, c.start_ns);
    json args = {{"mode", s.mode},
                 {"shapes", s.shapes},
                 {"kernel", s.kernel},
                 {"flops", s.flops},
                 {"bytes", s.bytes}};
    if (s.node >= 0) {
      args["node"] = s.node;
      args["graph"] = s.graph;
    }
    e["args"] = std::move(args);
    events.push_back(std::move(e));
  }
  for (const MemorySample& m : c.memory) {
    events.push_back({{"name", "memory"},
                      {"ph", "C"},
                      {"pid", 0},
                      {"ts", us(m.at_ns, c.start_ns)},
                      {"args", {{"in_use_bytes", m.in_use_bytes}, {"peak_bytes", m.peak_bytes}}}});
  }
  for (const PipelineSample& p : c.pipeline) {
    events.push_back({{"name", "data pipeline"},
                      {"ph", "C"},
                      {"pid", 0},
                      {"ts", us(p.at_ns, c.start_ns)},
                      {"args",
                       {{"consumer_wait_s", p.stats.consumer_wait_s},
                        {"rows_consumed", p.stats.rows_consumed}}}});
  }
  for (const CompileEvent& ce : c.compiles) {
    events.push_back({{"name", "compiled graph " + std::to_string(ce.compiles)},
                      {"cat", "compile"},
                      {"ph", "i"},
                      {"s", "p"},
                      {"pid", 0},
                      {"tid", 0},
                      {"ts", us(ce.at_ns, c.start_ns)},
                      {"args", {{"reason", ce.reason}, {"report", ce.report}}}});
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

json profile_json(const Collection& c) {
  json compiles = json::array();
  for (const CompileEvent& ce : c.compiles) {
    compiles.push_back({{"at_us", us(ce.at_ns, c.start_ns)},
                        {"compiles", ce.compiles},
                        {"reason", ce.reason},
                        {"report", ce.report},
                        {"counts", ce.counts},
                        {"graph_text", ce.graph_text},
                        {"graph_dot", ce.graph_dot}});
  }
  json pipeline = json::array();
  for (const PipelineSample& p : c.pipeline) {
    // diagnose()'s JSON; a number it could not write (NaN) leaves the sample without stats.
    json stats = json::parse(p.stats.to_json(), nullptr, /*allow_exceptions=*/false);
    if (stats.is_discarded()) stats = json::object();
    pipeline.push_back({{"at_us", us(p.at_ns, c.start_ns)}, {"stats", std::move(stats)}});
  }
  return {{"format", "kiln profile 1"},     {"duration_us", us(c.stop_ns, c.start_ns)},
          {"annotations", c.annotations},   {"allocator_peak_bytes", c.allocator_peak_bytes},
          {"threads", c.threads},           {"compiles", std::move(compiles)},
          {"pipeline", std::move(pipeline)}};
}

}  // namespace

void write_raw_files(const Collection& collection, const std::string& dir) {
  write_file_atomically(dir + "/" + kTraceFile, trace_json(collection).dump());
  write_file_atomically(dir + "/" + kProfileFile, profile_json(collection).dump(1));
}

}  // namespace kiln::profile
