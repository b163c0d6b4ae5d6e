// The compile report: what the passes did and what the memory plan holds, as one line for logs.
#include <sstream>
#include <string>

#include "kiln/graph/detail/executor_internal.h"

namespace kiln::graph {

std::string CompileReport::str() const {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << "compiled " << nodes_traced << " traced nodes into " << nodes_compiled
    << " kernels in " << compile_ms << " ms (trace " << trace_ms << " ms): folded " << folded
    << ", simplified " << simplified << ", cse " << cse_merged << ", dce " << dce_removed
    << ", fused elementwise " << fused_elementwise << ", epilogue " << fused_epilogue
    << ", reduction " << fused_reduction << ", bn+relu " << fused_bn_relu << ", bn+relu into conv "
    << fused_bn_relu_conv << ", matmul+update " << fused_update << ", pool+conv grad "
    << fused_pooled_conv_grad << ", recording pools " << recording_pools << ", streaming stores "
    << streaming_stores << ", relu masks " << relu_masks << ", blocked " << blocked_values
    << " (reorders " << layout_reorders << "); arena " << double(arena_bytes) / 1048576.0
    << " MiB (live peak " << double(live_bytes_peak) / 1048576.0 << " MiB, unplanned "
    << double(unplanned_bytes) / 1048576.0 << " MiB), in-place " << inplace_reuses
    << ", inputs read in place " << inputs_in_place << ", largest workspace "
    << double(workspace_bytes) / 1048576.0 << " MiB (outside the arena "
    << double(workspace_outside_arena) / 1048576.0 << " MiB)";
  return s.str();
}

namespace detail {

void count_fused_nodes(const Graph& graph, CompileReport& report) {
  report.fused_elementwise = report.fused_epilogue = report.fused_reduction = report.fused_bn_relu =
      report.fused_update = report.fused_pooled_conv_grad = report.recording_pools =
          report.fused_bn_relu_conv = 0;
  for (NodeId n : graph.schedule()) {
    switch (graph.node(n).type) {
      case NodeType::fused_elementwise:
        ++report.fused_elementwise;
        break;
      case NodeType::epilogue:
        ++report.fused_epilogue;
        break;
      case NodeType::fused_reduction:
        ++report.fused_reduction;
        break;
      case NodeType::bn_relu:
      case NodeType::bn_relu_grad:
      case NodeType::bn_add_relu_grad:
        ++report.fused_bn_relu;
        break;
      case NodeType::bn_relu_conv:
        ++report.fused_bn_relu_conv;
        break;
      case NodeType::fused_update:
        ++report.fused_update;
        break;
      case NodeType::pooled_conv_grad:
        ++report.fused_pooled_conv_grad;
        break;
      case NodeType::conv_relu_pool:
      case NodeType::pool_winners:
        ++report.recording_pools;
        break;
      default:
        break;
    }
  }
}

}  // namespace detail
}  // namespace kiln::graph
