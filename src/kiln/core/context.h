#pragma once
// Process-wide execution settings, with MindSpore's names:
//   kiln::set_context({.mode = kiln::GRAPH_MODE, .enable_graph_kernel = true});
#include <string>

namespace kiln {

enum ExecutionMode { GRAPH_MODE = 0, PYNATIVE_MODE = 1 };

struct Context {
  ExecutionMode mode = PYNATIVE_MODE;
  bool enable_graph_kernel = false;  // fusion passes in graph mode
  std::string device_target = "CPU";
  std::string save_graphs_path;  // when set, graph mode dumps IR (text + DOT) there
  // Graph mode: each training step runs its batch as this many slices, forward and backward one
  // after another, with one update (less activation memory; the summed gradient is the batch's).
  int micro_batches = 1;
};

void set_context(const Context& context);
const Context& get_context();

}  // namespace kiln
