#pragma once
// Internal to graph/ (no other folder includes it): what the files of an Executable share.
// executor.cpp compiles (pass_pipeline.cpp's run_passes, the memory plan, arena_binding.cpp's
// bind) and launches; compile_report.cpp fills and prints the report.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/graph/executor.h"
#include "kiln/ops/op.h"

namespace kiln::graph {

// One precomputed kernel launch: built by bind() (arena_binding.cpp), run by launch()
// (executor.cpp).
struct Executable::Launch {
  enum class Kind : uint8_t { kernel, pointwise, copy_reshape, view_copy, special };
  Kind kind = Kind::kernel;
  ops::OpKind op{};
  ops::KernelFn kernel = nullptr;
  ops::ViewFn view = nullptr;
  std::vector<Tensor> in;
  std::vector<Tensor> out;
  ops::Attrs attrs;
  bool reseed = false;  // dropout: a fresh mask every step, drawn as eager draws it
  std::shared_ptr<SpecialKernel> special;
  NodeId node = -1;
  int position = 0;                   // in the plan's schedule
  int threads = 1;                    // the launch's team (core/kernel_threads.h), set at bind
  std::span<std::byte> workspace;     // the special kernel's scratch
  std::vector<const void*> out_data;  // to catch a kernel that replaced its output tensor
};

namespace detail {

// Sets the report's fusion counts to the fused nodes left in `graph` (compile_report.cpp).
void count_fused_nodes(const Graph& graph, CompileReport& report);

// What a node's launch costs: the op table's cost where the node is one op; fused nodes count
// the work of the op they are built around over the bytes they move (launch_info.cpp).
ops::Cost node_cost(const Graph& graph, const Node& node);

// Whether each view node's output shares its input's memory (arena_binding.cpp).
std::vector<bool> probe_views(const Graph& graph);

}  // namespace detail
}  // namespace kiln::graph
