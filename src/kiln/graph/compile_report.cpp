// The compile report: what the passes did and what the memory plan holds, as one line for logs.
#include <sstream>
#include <string>

#include "kiln/core/error.h"
#include "kiln/graph/detail/executor_internal.h"
#include "kiln/graph/fusions.h"

namespace kiln::graph {

std::vector<FusedNodeCount> zero_fused_node_counts() {
  std::vector<FusedNodeCount> counts;
  for (std::string_view name : fusion_count_names()) counts.push_back({name, 0});
  return counts;
}

int CompileReport::fused(std::string_view name) const {
  for (const FusedNodeCount& count : fused_nodes) {
    if (count.name == name) return count.nodes;
  }
  std::string names;
  for (std::string_view n : fusion_count_names())
    names += (names.empty() ? "" : ", ") + std::string(n);
  throw Error("CompileReport::fused: no count is named '" + std::string(name) +
              "' (the counts: " + names + ")");
}

std::string CompileReport::str() const {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << "compiled " << nodes_traced << " traced nodes into " << nodes_compiled
    << " kernels in " << compile_ms << " ms (trace " << trace_ms << " ms): folded " << folded
    << ", simplified " << simplified << ", cse " << cse_merged << ", dce " << dce_removed
    << "; fused nodes:";
  for (const FusedNodeCount& count : fused_nodes)
    s << " " << count.name << " " << count.nodes << ",";
  s << " streaming stores " << streaming_stores << ", relu masks " << relu_masks << ", blocked "
    << blocked_values << " (reorders " << layout_reorders << "); arena "
    << double(arena_bytes) / 1048576.0 << " MiB (live peak " << double(live_bytes_peak) / 1048576.0
    << " MiB, unplanned " << double(unplanned_bytes) / 1048576.0 << " MiB), in-place "
    << inplace_reuses << ", inputs read in place " << inputs_in_place << ", largest workspace "
    << double(workspace_bytes) / 1048576.0 << " MiB (outside the arena "
    << double(workspace_outside_arena) / 1048576.0 << " MiB)";
  if (bf16_weight_copies > 0) s << ", bf16 weight copies " << bf16_weight_copies;
  if (concurrent_groups > 1)
    s << ", " << concurrent_groups << " groups of launches run side by side";
  return s.str();
}

namespace detail {

void count_fused_nodes(const Graph& graph, CompileReport& report) {
  report.fused_nodes = zero_fused_node_counts();
  for (NodeId n : graph.schedule()) {
    const FusedNodeDef* def = fused_node_def(graph.node(n).type);
    if (def == nullptr || def->counted_as.empty()) continue;
    for (FusedNodeCount& count : report.fused_nodes) {
      if (count.name == def->counted_as) ++count.nodes;
    }
  }
}

}  // namespace detail
}  // namespace kiln::graph
