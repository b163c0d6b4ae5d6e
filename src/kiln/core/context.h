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
  // Which algorithm runs an f32 3x3 stride-1 convolution (docs/numerics.md gives each one's error):
  //   "auto"     Winograd F(4x4, 3x3) where it is faster: Kiln's kernel for 16 or 32 channels
  //              from 2,048 output pixels on, oneDNN's for 64+ channels (32+ on graph mode's
  //              blocked layout); a direct convolution elsewhere.
  //   "direct"   never Winograd (Kiln's nor oneDNN's): the closest to float64.
  //   "winograd" Winograd wherever one of the two kernels takes the shape: groups 1, stride 1,
  //              dilation 1, and 16 or 32 channels in and out with padding 0..2 (Kiln's), or
  //              channel counts that are multiples of 16 (oneDNN's). Any other convolution
  //              (e.g. LeNet's 1->6 and 6->16 5x5, a stride-2 or 1x1 one) runs direct.
  // Eager mode reads it at each call, graph mode when a step is compiled (set it before then).
  std::string conv_algorithm = "auto";
};

void set_context(const Context& context);
const Context& get_context();

}  // namespace kiln
