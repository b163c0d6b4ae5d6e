#pragma once
// The fusion table, built from graph/fusion_list.h: what the pass pipeline runs, the compile
// report counts and CompileOptions::disabled_fusions names.
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kiln/graph/executor.h"
#include "kiln/graph/ir.h"

namespace kiln::graph {

class SpecialKernel;

// One fusion: its name, its pattern (a pass that rewrites matches into its own node types and
// returns how many it rewrote) and the CompileOptions flag that turns it on besides `fusion`.
struct FusionDef {
  std::string_view name;
  int (*pass)(Graph& graph);
  bool CompileOptions::*switched_by;
};

using FusedKernelMaker = std::shared_ptr<SpecialKernel> (*)(const Node& node,
                                                            std::span<const Tensor> inputs,
                                                            std::span<const Tensor> outputs);

// One node type a fusion makes: the fusion, the report count it adds to (empty: none) and its
// kernel.
struct FusedNodeDef {
  NodeType type;
  std::string_view fusion;
  std::string_view counted_as;
  FusedKernelMaker kernel;
};

// Every fusion, in the order the pipeline runs them.
std::span<const FusionDef> fusion_table();
// The fusion named `name`, or null.
const FusionDef* find_fusion(std::string_view name);
// The fused node type's row, or null for op, reorder and relu_mask nodes.
const FusedNodeDef* fused_node_def(NodeType type);
// The names the compile report counts fused nodes under, in the list's order.
std::span<const std::string_view> fusion_count_names();
// Whether `options` run this fusion: fusion on, its own flag on, its name not disabled.
bool fusion_enabled(const FusionDef& fusion, const CompileOptions& options);
// Throws Error naming a disabled_fusions entry that names no fusion (and the fusions there are).
void check_fusion_names(const CompileOptions& options);

}  // namespace kiln::graph
