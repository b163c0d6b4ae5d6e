#pragma once
// What the profiler collects while it runs, as plain records: op launches (eager kernels and
// compiled-graph launches), step phases, steps, allocator samples, compiled graphs and data
// pipeline statistics. All times are train::trace_clock_ns() readings.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/data/stats.h"
#include "kiln/train/step_trace.h"

namespace kiln::profile {

// What one kind of launch runs; launches with the same op, tensors and attributes share one.
struct OpSignature {
  std::string name;    // op or node label: "conv2d", "fused[add,relu]"
  std::string mode;    // "eager" or "graph"
  std::string shapes;  // inputs -> outputs: "f32[64,1,28,28] f32[6,1,5,5] -> f32[64,6,24,24]"
  std::string kernel;  // "eager kernel", "op kernel", "graph kernel", "fused elementwise", ...
  int32_t node = -1;   // graph mode: the node's id in its compiled graph
  uint64_t graph = 0;  // graph mode: the executable's id (Executable::id)
  double flops = 0;    // per launch, from the op table's cost (0: not counted)
  double bytes = 0;    // per launch: bytes read and written
};

struct OpEvent {
  uint32_t signature;  // index into Collection::signatures
  uint32_t thread;     // small thread number (0: the thread that started the profiler)
  int64_t begin_ns, end_ns;
};

struct PhaseEvent {
  train::StepPhase phase;
  int64_t begin_ns, end_ns;
};

struct StepEvent {
  int64_t global_step, batch_size;
  int64_t begin_ns, end_ns;
};

struct MemorySample {
  int64_t at_ns;
  int64_t in_use_bytes, peak_bytes;
};

struct CompileEvent {
  int64_t at_ns = 0;
  int compiles = 0;
  std::string reason;
  std::string report;                    // CompileReport::str()
  std::map<std::string, double> counts;  // the report's numbers by name
  std::string graph_text;                // the compiled graph's IR
  std::string graph_dot;                 // the same as Graphviz DOT
};

struct PipelineSample {
  int64_t at_ns;
  data::PipelineStats stats;
};

struct Collection {
  int64_t start_ns = 0, stop_ns = 0;
  std::vector<OpSignature> signatures;
  std::vector<OpEvent> ops;
  std::vector<PhaseEvent> phases;
  std::vector<StepEvent> steps;
  std::vector<MemorySample> memory;
  std::vector<CompileEvent> compiles;
  std::vector<PipelineSample> pipeline;
  int64_t allocator_peak_bytes = 0;  // the allocator's own peak counter when profiling stopped
  int threads = 1;                   // threads that launched ops
  std::map<std::string, std::string> annotations;  // the run's settings, for the report
};

}  // namespace kiln::profile
