#pragma once
// What the profiler collects while it runs, as plain records: op launches (eager kernels and
// compiled-graph launches), step phases, steps, the allocator's events, compiled graphs with
// their memory plans, data pipeline statistics and measured comparisons. All times are
// train::trace_clock_ns() readings.
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
  // The memory order of each tensor in `shapes`' order, "nchw" (contiguous) or "nhwc" (channels
  // last) for a 4-D one, "-" for others (always row-major): "nchw nchw -> nhwc"; empty when no
  // tensor is 4-D; graph mode names the activations kept in oneDNN's blocked format "nChw16c"
  // (graph/passes/block_layout.cpp).
  std::string layout;
  std::string launch;  // how it is launched: "eager kernel", "view", "op kernel", "graph kernel"...
  // The kernel that ran: oneDNN's implementation ("brgconv:avx512_core", several joined by " + ")
  // or Kiln's own ("kiln:winograd_f4x4_3x3", "kiln:pointwise"); ops/kernel_name.h.
  std::string kernel;
  std::string dtype;   // what it computes in: its first floating input's (or output's) dtype
  int threads = 1;     // the launch's kernel threads
  int32_t node = -1;   // graph mode: the node's id in its compiled graph
  uint64_t graph = 0;  // graph mode: the executable's id (Executable::id)
  // Graph mode: the step phase its node belongs to (graph_phases.h); graph_step when unknown.
  train::StepPhase phase = train::StepPhase::graph_step;
  double flops = 0;  // per launch, from the op table's cost (0: not counted)
  double bytes = 0;  // per launch: bytes read and written
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

// One allocation (bytes > 0) or release (bytes < 0) by Kiln's allocator, in size-class bytes.
struct AllocationEvent {
  int64_t at_ns;
  uint32_t thread;
  int64_t bytes, in_use_bytes;
};

// A buffer of a compiled graph's static memory plan (graph/memory_plan.h).
struct PlanBuffer {
  int64_t offset = 0, bytes = 0;
  int first = 0, last = 0;  // schedule positions that write it first and read it last
  std::string holds;        // the node that writes it first: "conv2d f32[64, 6, 24, 24]"
};

struct CompileEvent {
  int64_t at_ns = 0;
  int compiles = 0;
  uint64_t graph = 0;  // Executable::id
  std::string reason;
  std::string report;                    // CompileReport::str()
  std::map<std::string, double> counts;  // the report's numbers by name
  std::string graph_text;                // the compiled graph's IR
  std::string graph_dot;                 // the same as Graphviz DOT
  std::string traced_text, traced_dot;   // the graph as traced, before the passes (when kept)
  std::vector<PlanBuffer> buffers;       // the static memory plan
  // Per launched node: (node id, its schedule position), to place the plan's lifetimes on the
  // launches' times.
  std::vector<std::pair<int32_t, int>> node_positions;
};

struct PipelineSample {
  int64_t at_ns;
  data::PipelineStats stats;
};

// One training step under other settings, timed beside the profiled one (step_comparison.h),
// or mixed precision's own race (train/compiled_step.h).
struct StepTiming {
  std::string setting;    // "graph mode", "AMP O0", "this run"
  double ms = 0;          // per step: the median of interleaved steps, or the race's CPU time
  bool profiled = false;  // the settings the profiled run used
};

struct Collection {
  int64_t start_ns = 0, stop_ns = 0;
  std::vector<OpSignature> signatures;
  std::vector<OpEvent> ops;
  std::vector<PhaseEvent> phases;
  std::vector<StepEvent> steps;
  std::vector<MemorySample> memory;
  std::vector<AllocationEvent> allocations;
  std::vector<CompileEvent> compiles;
  std::vector<PipelineSample> pipeline;
  std::vector<StepTiming> amp_race;     // mixed precision's race, when the run had one
  std::vector<StepTiming> comparisons;  // step_comparison.h's timings
  int64_t allocator_peak_bytes = 0;     // the allocator's own peak counter when profiling stopped
  int threads = 1;                      // threads that launched ops
  int rank = 0, ranks = 1;              // the job's rank and size (mpirun)
  std::map<std::string, std::string> annotations;  // the run's settings, for the report
};

}  // namespace kiln::profile
