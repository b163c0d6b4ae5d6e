// The pass pipeline: everything compiling does to a traced graph, in the order it runs. Each
// pass is one file in passes/ (declared in detail/passes.h) with its own test in tests/graph/;
// the report counts what each did.
#include <cstdlib>

#include "kiln/graph/detail/executor_internal.h"
#include "kiln/graph/detail/passes.h"
#include "kiln/graph/fusions.h"

namespace kiln::graph {

void run_passes(Graph& graph, const CompileOptions& options, CompileReport& report) {
  check_fusion_names(options);
  // 1. Clean-up, repeated while it still changes something: algebraic simplification, constant
  //    folding, common subexpressions, dead code.
  report.dce_removed += passes::eliminate_dead_code(graph);
  if (options.optimize) {
    for (int round = 0; round < 4; ++round) {
      int s = passes::simplify_algebra(graph);
      int f = passes::fold_constants(graph);
      int c = passes::eliminate_common_subexpressions(graph);
      int d = passes::eliminate_dead_code(graph);
      report.simplified += s;
      report.folded += f;
      report.cse_merged += c;
      report.dce_removed += d;
      if (s + f + c + d == 0) break;
    }
  }

  // 2. Graph-kernel fusion (Context::enable_graph_kernel): the fusions of graph/fusion_list.h in
  //    its order, each replacing its pattern by nodes of its own types; the report counts the
  //    fused nodes that survive (a reduction may swallow an elementwise fusion).
  if (options.fusion) {
    for (const FusionDef& fusion : fusion_table()) {
      if (fusion_enabled(fusion, options)) fusion.pass(graph);
    }
    report.dce_removed += passes::eliminate_dead_code(graph);
    detail::count_fused_nodes(graph, report);
  }

  // 3. Scheduling: nodes renumbered in execution order, then moved where they let memory go or
  //    overlap work.
  graph.reorder(graph.schedule());
  if (options.optimize && !options.updates_last) passes::schedule_updates_early(graph);
  passes::schedule_collectives(graph);  // right after schedule_updates_early
  if (options.bf16_weight_copies) {
    report.bf16_weight_copies = passes::keep_bf16_weight_copies(graph);
  }

  // 4. Layout and stores (with fusion): blocked activations between the kernels that read them,
  //    streaming stores, relu outputs kept as byte masks.
  // KILN_GRAPH_NO_BLOCK_LAYOUT=1 turns the layout pass off (to measure what it does).
  static const bool no_block_layout = std::getenv("KILN_GRAPH_NO_BLOCK_LAYOUT") != nullptr;
  if (options.fusion && options.block_layout && !no_block_layout) {
    report.blocked_values = passes::block_layout(graph);
    if (options.check_plan) passes::check_block_layout(graph);
    for (NodeId n : graph.schedule()) {
      report.layout_reorders += graph.node(n).type == NodeType::reorder ? 1 : 0;
    }
  }
  if (options.fusion) report.streaming_stores = passes::mark_streaming_stores(graph);
  if (options.fusion && options.relu_masks) {
    report.relu_masks = passes::compact_relu_masks(graph);
  }
}

}  // namespace kiln::graph
