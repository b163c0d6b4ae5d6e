#pragma once
// The profiler's view of a compiled graph's launches. An Executable reads the observer once per
// run of its launch list; with none installed it reads no clock (the check is one atomic load
// per run, not per launch).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln::graph {

class Executable;

// One launch of a compiled graph, described once (its node, tensors, kernel and cost do not
// change between steps).
struct LaunchInfo {
  int32_t node = -1;   // the node's id in the compiled graph
  std::string label;   // node_label: "conv2d", "fused[add,relu]"
  std::string kernel;  // what runs it: "op kernel", "pointwise", "fused elementwise", "special"...
  // Kiln's own kernel, named as ops/kernel_name.h names kernels ("kiln:pointwise",
  // "kiln:fused_elementwise"): what the profiler shows when no kernel noted itself (an op table
  // kernel or oneDNN primitive that did is named by its note instead).
  std::string own_kernel;
  std::vector<ops::TensorMeta> inputs, outputs;
  ops::Cost cost;  // flops 0 where the node's work is not counted (copies, reorders)
};

// Told each launch of every Executable with its steady-clock begin and end (nanoseconds).
using LaunchObserver = void (*)(const Executable& executable, size_t launch, int64_t begin_ns,
                                int64_t end_ns);

// Null removes the observer. Thread-safe.
void set_launch_observer(LaunchObserver observer);
LaunchObserver launch_observer();

}  // namespace kiln::graph
