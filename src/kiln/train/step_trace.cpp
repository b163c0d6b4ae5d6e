#include "kiln/train/step_trace.h"

#include <atomic>
#include <chrono>

namespace kiln::train {
namespace {

constinit std::atomic<StepTraceSink*> g_sink{nullptr};

constexpr std::string_view kPhaseNames[] = {
#define KILN_STEP_PHASE_NAME(id, display) display,
    KILN_FOR_EACH_STEP_PHASE(KILN_STEP_PHASE_NAME)
#undef KILN_STEP_PHASE_NAME
};
static_assert(std::size(kPhaseNames) == size_t(kNumStepPhases));

}  // namespace

std::string_view step_phase_name(StepPhase phase) {
  return kPhaseNames[size_t(phase)];
}

int64_t trace_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void set_step_trace_sink(StepTraceSink* sink) {
  g_sink.store(sink, std::memory_order_release);
}

StepTraceSink* step_trace_sink() {
  return g_sink.load(std::memory_order_acquire);
}

}  // namespace kiln::train
