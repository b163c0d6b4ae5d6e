#pragma once
// Compiling a traced graph and running it. Compilation runs the passes, plans memory and binds
// every value to its tensor once; a step then walks a precomputed list of kernel launches with
// bound buffers: no shape inference, no allocation, no lookups.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/graph/ir.h"
#include "kiln/graph/launch_observer.h"
#include "kiln/graph/memory_plan.h"

namespace kiln::graph {

class SpecialKernel;

// Memory shared by the graphs of one training step (one per input shape): they never run at
// the same time, so one arena, sized for the largest, serves them all.
struct Arena {
  std::shared_ptr<Storage> storage;
};

// Whether keeping activations blocked (CompileOptions::block_layout) pays on this CPU: only
// where oneDNN has fast nChw16c convolutions (AVX-512; see ops::dnnl_util::dnnl_nchw16c_native).
bool block_layout_pays();

struct CompileOptions {
  bool optimize = true;    // constant folding, CSE, DCE, algebraic simplification
  bool fusion = false;     // graph-kernel fusion (Context::enable_graph_kernel)
  bool inplace = true;     // the memory plan may write an output over a dying input (memory_plan.h)
  bool check_plan = true;  // verify the memory plan (no two live tensors overlap)
  // Read each graph input where the caller keeps it instead of copying it into the arena (an
  // input some kernel cannot follow to a new address is copied anyway; see SpecialKernel).
  bool inputs_in_place = true;
  // Fill each kernel's workspace with NaN before it runs: a kernel that reads scratch it did not
  // write this run then gives NaN (a debugging aid for kernels and their tests).
  bool poison_workspaces = false;
  // Keep activations in oneDNN's blocked layout between the kernels that read it (with
  // fusion; passes/block_layout.cpp). On by default only where that layout has fast
  // convolutions: on an AVX2-only CPU they would all run oneDNN's reference kernel (a compiled
  // ResNet-20 step went from seconds to minutes). Setting it true forces the pass anyway.
  bool block_layout = block_layout_pays();
  // A batch norm + relu read only by 3x3 convolutions that Kiln's Winograd kernel runs is
  // applied by them as they read (with fusion; passes/fuse_bn_relu_conv.cpp).
  bool bn_relu_into_conv = true;
  // A relu output the backward reads last only for the relu's gradient is kept as a byte mask
  // after its last other reader (with fusion; passes/compact_relu_masks.cpp).
  bool relu_masks = true;
  // Every optimizer update runs after all other work instead of interleaved with backward, so
  // run_until_updates() can stop before any of them (loss scaling skips overflowed steps).
  // Costs memory: every gradient is alive at once, as in eager mode.
  bool updates_last = false;
  // Mixed precision: a weight cast to bf16 every step keeps a bf16 copy, written by its
  // optimizer update (passes/bf16_weight_copies.cpp). Same results either way.
  bool bf16_weight_copies = true;
  // The training step (train/compiled_step.h) traces its batch as this many equal slices, the
  // forward and backward of each before the next, and one update from their summed gradients:
  // the activations of one slice at a time, for some speed (its evaluation forward too, slice by
  // slice). A batch that does not split evenly runs whole. The network must compute each sample
  // on its own: BatchNorm in training, which does not, is refused.
  int micro_batches = 1;
  // The most threads one launch uses: 0, the process's budget (set_num_threads). Each launch
  // takes as many of them as its cost pays for (core/kernel_threads.h), chosen when it is
  // bound; with threads_per_launch off every launch uses them all (the fixed team of old).
  int kernel_threads = 0;
  bool threads_per_launch = true;
  // Inter-op parallelism: the launches form up to this many groups, each made of whole parts of
  // the graph that share no memory any other part writes (the optimizer updates of different
  // parameters, say), balanced by the op table's costs, so that as many threads can run them side
  // by side (begin_groups, run_group). A part that streams from memory and costs more than a
  // group's share runs after the groups instead, its kernels on the threads their costs pay
  // for (graph/launch_groups.cpp says why). Every buffer keeps its
  // memory for the whole step (PlanOptions::whole_step_lifetimes). A graph with fewer than two
  // parts to group, or whose kernels need scratch, makes one group. 1: off.
  int concurrent_groups = 1;
  std::string dump_dir;  // when set, the IR before and after the passes is written there
  // Keep a copy of the graph as traced, before the passes (traced_graph()): the profiler shows
  // it beside the compiled one.
  bool keep_traced_graph = false;
  std::string dump_name = "graph";
  std::shared_ptr<Arena> arena;  // shared with other graphs; null: a private one
  // Fusions (graph/fusion_list.h's names) not to run even with `fusion` on; a name that is not
  // a fusion is an error.
  std::vector<std::string> disabled_fusions;
};

// How many nodes of one kind the fusions left in a compiled graph (graph/fusion_list.h's
// counted_as names: mostly the fusion's own).
struct FusedNodeCount {
  std::string_view name;
  int nodes = 0;
};
// Every count of fusion_list.h at zero, in the list's order.
std::vector<FusedNodeCount> zero_fused_node_counts();

struct CompileReport {
  double trace_ms = 0;    // filled in by whoever traced
  double compile_ms = 0;  // passes, memory plan and binding
  size_t nodes_traced = 0;
  size_t nodes_compiled = 0;
  size_t launches = 0;
  int simplified = 0, folded = 0, cse_merged = 0, dce_removed = 0;
  // Fused nodes left after the passes, per count of graph/fusion_list.h ("bn_relu",
  // "recording_pools", ...); read one with fused(name).
  std::vector<FusedNodeCount> fused_nodes = zero_fused_node_counts();
  int streaming_stores = 0;     // batch-norm outputs written past the caches (stream_stores.cpp)
  int relu_masks = 0;           // relu outputs kept as bytes (compact_relu_masks.cpp)
  int bf16_weight_copies = 0;   // weights whose update writes their bf16 copy
  int64_t arena_bytes = 0;      // the plan's peak
  int64_t live_bytes_peak = 0;  // most bytes live at once (lower bound for any plan)
  int64_t unplanned_bytes = 0;  // what allocating every tensor separately would take
  int64_t constant_bytes = 0;   // folded and traced constants
  int inplace_reuses = 0;
  int inputs_in_place = 0;                      // graph inputs read where the caller keeps them
  int64_t workspace_bytes = 0;                  // the largest kernel scratch (SpecialKernel)
  int concurrent_groups = 1;                    // CompileOptions::concurrent_groups formed
  int64_t workspace_outside_arena = 0;          // what found no gap in the arena at its kernel
  int blocked_values = 0, layout_reorders = 0;  // passes/block_layout.cpp
  std::string str() const;                      // one line, for logs
  // The fused nodes counted under `name`; throws Error for a name fusion_list.h does not count.
  int fused(std::string_view name) const;
};

class Executable {
 public:
  Executable(Graph graph, const CompileOptions& options);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // Runs one step over `inputs` (shapes and dtypes must match the graph's inputs) and returns
  // copies of the graph's outputs. Inputs are read where they are (or copied into the arena,
  // see CompileOptions::inputs_in_place); the caller must not change them during the step,
  // which for run_until_updates() lasts until run_updates() or the next step.
  std::vector<Tensor> run(std::span<const Tensor> inputs);
  // As run(), but returns the graph's own output tensors, not copies: they stay valid until
  // this graph, or another sharing its arena, runs again (a batch-split step's slices hand
  // their gradients to the update this way).
  std::vector<Tensor> run_in_arena(std::span<const Tensor> inputs);
  // Graphs compiled with updates_last: a step in two parts. run_until_updates() runs every
  // launch before the first optimizer update and returns the graph's outputs (all computed by
  // then); run_updates() then runs the updates, or the caller skips them and no parameter or
  // optimizer state has changed.
  std::vector<Tensor> run_until_updates(std::span<const Tensor> inputs);
  void run_updates();
  // A step whose groups (CompileOptions::concurrent_groups) run on several threads at once:
  // begin_groups() checks and takes the inputs on one thread; then each group's thread calls
  // run_group(g) (its launches in schedule order, each on that thread alone); after every group
  // has run, end_groups() runs the launches left for after the groups and returns the outputs as
  // run() does. run() runs every launch in schedule order.
  void begin_groups(std::span<const Tensor> inputs);
  void run_group(int group);
  std::vector<Tensor> end_groups();
  int num_groups() const { return int(groups_.size()); }
  // The launches of group g, and those end_groups() runs, in schedule order.
  const std::vector<size_t>& group_launches(int group) const { return groups_.at(size_t(group)); }
  const std::vector<size_t>& launches_after_groups() const { return after_groups_; }

  const CompileReport& report() const { return report_; }
  CompileReport& report() { return report_; }
  const Graph& graph() const { return graph_; }
  // The graph before the passes; null unless CompileOptions::keep_traced_graph.
  const Graph* traced_graph() const { return traced_graph_.get(); }
  const MemoryPlan& plan() const { return plan_; }
  // Per-launch times summed over the steps run so far, grouped by kernel label, longest first
  // (collected only when KILN_GRAPH_PROFILE is set in the environment).
  std::string profile_summary() const;
  // A number no other Executable of this process has (the profiler keys launches by it).
  uint64_t id() const { return id_; }
  size_t num_launches() const;
  // What launch i runs, for the profiler (launch_info.cpp).
  LaunchInfo launch_info(size_t i) const;
  // Whether inputs with these metas can run without recompiling.
  bool accepts(std::span<const Tensor> inputs) const;
  // The threads launch i runs on (chosen at bind time).
  int launch_threads(size_t i) const;
  // Bytes of graph inputs copied so far (into the arena, or staged for an unaligned or strided
  // batch): 0 while every batch was read where the caller keeps it.
  int64_t input_bytes_copied() const { return input_bytes_copied_; }
  // How often a step began by casting a weight's bf16 copy afresh (CompileOptions::
  // bf16_weight_copies): on the first step, and after something else wrote the weight.
  int64_t bf16_copy_refreshes() const { return bf16_copy_refreshes_; }

 private:
  struct Launch;
  void bind();
  void check_bindings();
  void place_workspaces();                     // kernels' scratch into the arena's gaps (bind)
  void start(std::span<const Tensor> inputs);  // checks and takes the inputs
  void take_inputs(std::span<const Tensor> inputs);
  void release_inputs();
  bool is_state_memory(const Storage& storage) const;
  void find_input_followers();               // bind: which kernels read each input in place
  bool copy_inputs_kernels_cannot_follow();  // true when some input must be copied after all
  void launch(size_t begin, size_t end);
  // Launch li; `threads` > 0 overrides the team chosen at bind.
  void launch_one(size_t li, LaunchObserver observer, int threads = 0);
  void form_groups();  // after bind (concurrent_groups)
  // State written in place (state_writes.cpp): which launches write which state tensors (bind),
  // marking them written once those launches ran (Storage::writes), and casting each weight's
  // bf16 copy afresh at a step's start where the weight or the copy was written elsewhere.
  void find_state_writes();
  void note_state_writes(size_t begin, size_t end);
  void refresh_bf16_copies();
  std::vector<Tensor> outputs() const;

  Graph graph_;
  std::shared_ptr<const Graph> traced_graph_;  // keep_traced_graph: graph_ before the passes
  CompileOptions options_;
  CompileReport report_;
  MemoryPlan plan_;
  std::vector<bool> view_aliases_;
  std::shared_ptr<Arena> arena_holder_;
  std::shared_ptr<Storage> arena_;      // the storage bound now
  std::shared_ptr<Storage> workspace_;  // for kernels whose scratch found no gap in the arena
  std::vector<Tensor> bound_;           // per value
  std::vector<bool> inputs_in_place_;   // per graph input
  std::vector<std::shared_ptr<Storage>> input_slots_;  // those inputs' storage
  std::vector<Tensor> input_stages_;                   // for batches that cannot be read in place
  std::vector<std::vector<SpecialKernel*>> input_followers_;  // kernels to tell of a move
  std::vector<bool> input_unfollowed_;  // read by a kernel that cannot follow a move
  std::vector<Launch> launches_;
  std::vector<std::pair<ValueId, const void*>> state_data_;
  struct StateWrite {
    size_t launch;
    Tensor tensor;
  };
  std::vector<StateWrite> state_writes_;  // in launch order
  // A weight, its bf16 copy, the launch that writes both, and the write counts of the two
  // (Storage::writes) when the copy last equalled the weight rounded.
  struct Bf16Copy {
    Tensor weight, copy;
    size_t update_launch;
    uint64_t weight_writes = Storage::kUntracked, copy_writes = Storage::kUntracked;
  };
  std::vector<Bf16Copy> bf16_copies_;
  int64_t bf16_copy_refreshes_ = 0;
  bool profile_ = false;
  std::vector<double> launch_ns_;  // per launch, when profiling
  int64_t steps_run_ = 0;          // to notice a replaced storage
  int64_t input_bytes_copied_ = 0;
  uint64_t id_ = 0;
  size_t first_update_ = 0;       // updates_last: the launches from here on are the updates
  bool updates_pending_ = false;  // run_until_updates() ran, run_updates() may follow
  std::vector<std::vector<size_t>> groups_;  // launch indices per group (one group: all)
  std::vector<size_t> after_groups_;         // the parts too large for a group
};

// The pass pipeline (pass_pipeline.cpp, one list in the order the passes run): clean-up, fusion,
// scheduling, layout, as the options ask, updating the report's counts.
void run_passes(Graph& graph, const CompileOptions& options, CompileReport& report);

}  // namespace kiln::graph
