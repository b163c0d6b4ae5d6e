#pragma once
// What a training step reports to a profiler: its phases, its end, the graphs it compiled and
// the data pipeline's statistics. train::Model marks them through the sink installed here; with
// none installed a phase costs one atomic load and no clock read.
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/data/stats.h"
#include "kiln/graph/executor.h"

namespace kiln::train {

// Every phase a step is split into, in the order a step runs them: (identifier, display name).
// A step's phases do not overlap and, with the time between them, make up the step.
#define KILN_FOR_EACH_STEP_PHASE(X)                        \
  X(data_wait, "data wait")                                \
  X(forward, "forward")                                    \
  X(backward, "backward")                                  \
  X(communication, "communication")                        \
  X(update, "optimizer update")                            \
  X(graph_step, "compiled step (forward+backward+update)") \
  X(callbacks, "callbacks")

enum class StepPhase : uint8_t {
#define KILN_STEP_PHASE_ENUM(id, display) id,
  KILN_FOR_EACH_STEP_PHASE(KILN_STEP_PHASE_ENUM)
#undef KILN_STEP_PHASE_ENUM
};
inline constexpr int kNumStepPhases = 0
#define KILN_STEP_PHASE_COUNT(id, display) +1
    KILN_FOR_EACH_STEP_PHASE(KILN_STEP_PHASE_COUNT)
#undef KILN_STEP_PHASE_COUNT
    ;

std::string_view step_phase_name(StepPhase phase);

// The steady clock the phases, kernels and launches are all timed with, in nanoseconds.
int64_t trace_clock_ns();

class StepTraceSink {
 public:
  virtual ~StepTraceSink() = default;
  virtual void phase(StepPhase phase, int64_t begin_ns, int64_t end_ns) = 0;
  // A training step ended; it began where the previous one ended (or where training began), so
  // the phases between begin and end make up the step.
  virtual void step(int64_t global_step, int64_t batch_size, int64_t begin_ns, int64_t end_ns) = 0;
  // A training graph was compiled (the first, or a recompile: `reason` says why).
  virtual void compiled(const graph::Executable& executable, int compiles,
                        const std::string& reason) = 0;
  // The training data pipeline's statistics at `at_ns` (diagnosed: bottleneck and advice).
  virtual void pipeline(const data::PipelineStats& stats, int64_t at_ns) = 0;
  // Mixed precision's race (train/compiled_step.h): one step of the first training graph with
  // bf16 in it against the same step in fp32, in CPU milliseconds; the faster one trains.
  virtual void amp_race(double mixed_ms, double fp32_ms) {
    (void)mixed_ms;
    (void)fp32_ms;
  }
};

// Null removes the sink. The sink must outlive its installation. Thread-safe.
void set_step_trace_sink(StepTraceSink* sink);
StepTraceSink* step_trace_sink();

// Reports the enclosing block as one phase when a sink is installed.
class PhaseScope {
 public:
  explicit PhaseScope(StepPhase phase)
      : sink_(step_trace_sink()), phase_(phase), begin_ns_(sink_ ? trace_clock_ns() : 0) {}
  ~PhaseScope() {
    if (sink_) sink_->phase(phase_, begin_ns_, trace_clock_ns());
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  StepTraceSink* sink_;
  StepPhase phase_;
  int64_t begin_ns_;
};

}  // namespace kiln::train
