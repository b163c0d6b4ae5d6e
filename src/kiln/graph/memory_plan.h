#pragma once
// The static memory plan: every tensor a compiled step creates gets a fixed place in one arena,
// chosen once at compile time from the lifetimes the schedule implies, and reused every step.
// Values whose lifetimes do not overlap share memory; an elementwise op whose input dies at it
// writes its output over that input (in-place), when shapes, dtypes and layouts agree, and so do
// the batch-norm gradient kernels, fused or not, over the gradients they consume. Kernels'
// scratch (workspaces) goes into the gaps the tensors leave while each kernel runs.
#include <cstdint>
#include <vector>

#include "kiln/graph/ir.h"

namespace kiln::graph {

struct MemoryPlan {
  struct Buffer {
    int64_t offset = 0;  // bytes from the arena's start
    int64_t bytes = 0;   // rounded up to the alignment
    int first = 0;       // schedule position that writes it first (-1: before the first node)
    int last = 0;        // last schedule position that reads it
    std::vector<ValueId> values;  // the values stored in it (several with in-place reuse)
  };
  // Scratch of the kernel at `position`, live only while it runs: packed with the tensors when
  // its size was known (PlanOptions::workspace_bytes, `reserved`), else put in a gap they leave
  // (place_workspace).
  struct Workspace {
    int64_t offset = 0;
    int64_t bytes = 0;
    int position = 0;
    bool reserved = false;
  };
  static constexpr int kNone = -1;
  std::vector<Buffer> buffers;
  std::vector<Workspace> workspaces;
  // Per value: the buffer holding it (kNone for state, constants, inputs read in place, and
  // views that alias their input, which use `alias_of` instead).
  std::vector<int> buffer_of;
  // Per value: the value whose memory a view aliases (itself when it owns a buffer or is bound).
  std::vector<ValueId> alias_of;
  std::vector<NodeId> schedule;  // positions -> nodes
  int64_t arena_bytes = 0;       // the plan's peak: the arena's size
  int64_t live_bytes_peak = 0;   // most bytes live at one position (a lower bound for any plan)
  int64_t total_bytes = 0;       // sum of all buffers and packed workspaces (each allocated apart)
  int inplace_reuses = 0;
};

struct PlanOptions {
  bool inplace = true;
  int64_t alignment = 64;
  // Per graph input: read where the caller keeps it, so it gets no buffer (and nothing is ever
  // written over it). Empty: every input is copied into its own buffer.
  std::vector<bool> inputs_in_place;
  // Per schedule position: bytes of workspace the kernel there needs (empty: none known).
  std::vector<int64_t> workspace_bytes;
  // Every buffer keeps its memory for the whole step: no two values share it (in-place reuse
  // within one node aside), so independent parts of the graph may run at the same time
  // (CompileOptions::concurrent_groups).
  bool whole_step_lifetimes = false;
};

// `view_aliases[node]`: whether a view node's output shares its input's memory (the executor
// probes this; a reshape of a channels-last tensor copies). Nodes that are not views: ignored.
MemoryPlan plan_memory(const Graph& graph, const std::vector<bool>& view_aliases,
                       const PlanOptions& options = {});

// Places `bytes` of scratch for the kernel at schedule `position`: in the smallest gap of the
// arena that neither a buffer live there nor a workspace already placed there uses. Returns
// its offset, or kNone when no gap is large enough: the arena does not grow, because tensors
// are bound to it by then.
int64_t place_workspace(MemoryPlan& plan, int position, int64_t bytes);

// Throws Error naming the two values if any two buffers that are live at the same schedule
// position overlap in the arena, or if a buffer lies outside it; likewise for a workspace and
// the buffers live at its position.
void check_memory_plan(const MemoryPlan& plan);

// Whether a node runs through the pointwise engine (reads and writes index by index, so its
// output may overwrite an input that dies there).
bool is_pointwise(const Node& node);

}  // namespace kiln::graph
