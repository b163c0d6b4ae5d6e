#include "kiln/graph/executor.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/graph/dump.h"
#include "kiln/graph/fused_elementwise.h"
#include "kiln/graph/fused_kernels.h"
#include "kiln/graph/passes/passes.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/kernels/copy.h"
#include "kiln/ops/kernels/pointwise.h"

namespace kiln::graph {

struct Executable::Launch {
  enum class Kind : uint8_t { kernel, pointwise, fused, copy_reshape, view_copy, special };
  Kind kind = Kind::kernel;
  ops::OpKind op{};
  ops::KernelFn kernel = nullptr;
  ops::ViewFn view = nullptr;
  std::vector<Tensor> in;
  std::vector<Tensor> out;
  ops::Attrs attrs;
  bool reseed = false;  // dropout: a fresh mask every step, drawn as eager draws it
  std::shared_ptr<FusedElementwise> fused;
  std::shared_ptr<SpecialKernel> special;
  NodeId node = -1;
  int position = 0;                   // in the plan's schedule
  std::span<std::byte> workspace;     // the special kernel's scratch
  std::vector<const void*> out_data;  // to catch a kernel that replaced its output tensor
};

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Strides strides_for(const ops::TensorMeta& m) {
  if (m.layout == ops::Layout::channels_last && m.shape.rank() == 4) {
    return channels_last_strides(m.shape);
  }
  return contiguous_strides(m.shape);
}

// A tensor over memory someone else owns; `keeper` keeps that memory alive.
Tensor tensor_over(void* data, const ops::TensorMeta& m, std::shared_ptr<void> keeper) {
  auto impl = std::make_shared<TensorImpl>();
  size_t bytes = size_t(m.shape.numel()) * dtype_size(m.dtype);
  impl->storage = std::make_shared<Storage>(data, bytes, std::move(keeper));
  impl->shape = m.shape;
  impl->strides = strides_for(m);
  impl->dtype = m.dtype;
  return Tensor(std::move(impl));
}

// Read-only zero pages: probing a view reads (at most) these and never faults real memory in.
struct ZeroMapping {
  explicit ZeroMapping(size_t bytes) : size(std::max<size_t>(bytes, 4096)) {
    ptr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ptr == MAP_FAILED)
      throw Error("graph compile: cannot map " + std::to_string(size) + " bytes");
  }
  ~ZeroMapping() { munmap(ptr, size); }
  void* ptr;
  size_t size;
};

// Whether each view node's output shares its input's memory. Views are run on probe tensors
// that have the real layouts; a view that has to copy (reshape of a channels-last tensor)
// shows itself by returning a tensor over new storage.
std::vector<bool> probe_views(const Graph& g) {
  std::vector<bool> aliases(g.num_nodes());
  std::vector<NodeId> order = g.schedule();
  size_t max_bytes = 0;
  bool any_view = false;
  for (NodeId n : order) {
    const Node& node = g.node(n);
    if (!is_view(node)) continue;
    any_view = true;
    const ops::TensorMeta& m = g.value(node.inputs[0]).meta;
    max_bytes = std::max(max_bytes, size_t(m.shape.numel()) * dtype_size(m.dtype));
  }
  if (!any_view) return aliases;
  ZeroMapping zeros(max_bytes);
  std::vector<Tensor> probe(g.num_values());
  for (NodeId n : order) {
    const Node& node = g.node(n);
    if (!is_view(node)) continue;
    ValueId in = node.inputs[0];
    const Value& v = g.value(in);
    if (!probe[size_t(in)].defined()) {
      if (v.kind == ValueKind::state || v.kind == ValueKind::constant) {
        probe[size_t(in)] = v.tensor;
      } else {
        probe[size_t(in)] = tensor_over(zeros.ptr, v.meta, nullptr);
      }
    }
    const Tensor& x = probe[size_t(in)];
    Tensor y = ops::op_def(node.op).view(x, node.attrs);
    aliases[size_t(n)] = y.impl()->storage == x.impl()->storage;
    probe[size_t(node.outputs[0])] = aliases[size_t(n)] ? y : Tensor();
  }
  return aliases;
}

}  // namespace

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

void run_passes(Graph& graph, const CompileOptions& options, CompileReport& report) {
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
  if (options.fusion) {
    // Before the epilogues: the sum of micro-batches' weight-gradient products would otherwise
    // become one product with the other as its residual add, and the velocity could take neither.
    report.fused_update += passes::fuse_matmul_momentum(graph);
    report.fused_bn_relu += passes::fuse_bn_relu(graph);
    report.fused_epilogue += passes::fuse_epilogues(graph);
    if (options.bn_relu_into_conv) report.fused_bn_relu_conv += passes::fuse_bn_relu_conv(graph);
    report.fused_pooled_conv_grad += passes::fuse_pooled_conv_grad(graph);
    report.fused_elementwise += passes::fuse_elementwise(graph);
    report.fused_reduction += passes::fuse_reductions(graph);
    report.dce_removed += passes::eliminate_dead_code(graph);
    // What survived (a reduction may swallow an elementwise fusion).
    report.fused_elementwise = report.fused_epilogue = report.fused_reduction =
        report.fused_bn_relu = report.fused_update = report.fused_pooled_conv_grad =
            report.recording_pools = report.fused_bn_relu_conv = 0;
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
}

Executable::Executable(Graph graph, const CompileOptions& options)
    : graph_(std::move(graph)), options_(options) {
  auto t0 = std::chrono::steady_clock::now();
  graph_.verify();
  report_.nodes_traced = graph_.num_live_nodes();
  if (!options_.dump_dir.empty()) dump(graph_, options_.dump_dir, options_.dump_name + "_0_traced");
  run_passes(graph_, options_, report_);
  graph_.reorder(graph_.schedule());
  if (options_.optimize && !options_.updates_last) passes::schedule_updates_early(graph_);
  // KILN_GRAPH_NO_BLOCK_LAYOUT=1 turns the layout pass off (to measure what it does).
  static const bool no_block_layout = std::getenv("KILN_GRAPH_NO_BLOCK_LAYOUT") != nullptr;
  if (options_.fusion && options_.block_layout && !no_block_layout) {
    report_.blocked_values = passes::block_layout(graph_);
    if (options_.check_plan) passes::check_block_layout(graph_);
    for (NodeId n : graph_.schedule()) {
      report_.layout_reorders += graph_.node(n).type == NodeType::reorder ? 1 : 0;
    }
  }
  if (options_.fusion) report_.streaming_stores = passes::mark_streaming_stores(graph_);
  if (options_.fusion && options_.relu_masks) {
    report_.relu_masks = passes::compact_relu_masks(graph_);
  }
  graph_.verify();
  if (!options_.dump_dir.empty()) {
    dump(graph_, options_.dump_dir, options_.dump_name + "_1_compiled");
  }
  report_.nodes_compiled = graph_.num_live_nodes();
  view_aliases_ = probe_views(graph_);
  inputs_in_place_.assign(graph_.inputs().size(), options_.inputs_in_place);
  // Planned and bound again when a kernel cannot follow an input read in place, or when some
  // kernel's workspace found no gap: the plan then packs those workspaces, now that their sizes
  // are known, with the tensors (the others still go into gaps).
  std::vector<int64_t> workspace_bytes;
  for (;;) {
    plan_ = plan_memory(graph_, view_aliases_,
                        {.inplace = options_.inplace,
                         .inputs_in_place = inputs_in_place_,
                         .workspace_bytes = workspace_bytes});
    if (options_.check_plan) check_memory_plan(plan_);
    bind();
    if (copy_inputs_kernels_cannot_follow()) continue;
    if (report_.workspace_outside_arena == 0 || !workspace_bytes.empty()) break;
    workspace_bytes.assign(plan_.schedule.size(), 0);
    for (const Launch& l : launches_) {
      if (!l.workspace.empty() && l.workspace.data() == workspace_->data()) {
        workspace_bytes[size_t(l.position)] = int64_t(l.workspace.size());
      }
    }
  }
  report_.arena_bytes = plan_.arena_bytes;
  report_.live_bytes_peak = plan_.live_bytes_peak;
  report_.unplanned_bytes = plan_.total_bytes;
  report_.inplace_reuses = plan_.inplace_reuses;
  report_.inputs_in_place = int(std::count(inputs_in_place_.begin(), inputs_in_place_.end(), true));
  for (size_t v = 0; v < graph_.num_values(); ++v) {
    const Value& val = graph_.value(ValueId(v));
    if (val.kind == ValueKind::constant && val.tensor.defined()) {
      report_.constant_bytes += int64_t(val.tensor.nbytes());
    }
  }
  report_.compile_ms = ms_since(t0);
}

Executable::~Executable() {
  if (profile_ && steps_run_ > 1) std::fprintf(stderr, "%s", profile_summary().c_str());
}

std::string Executable::profile_summary() const {
  std::vector<std::pair<double, std::string>> rows;
  std::unordered_map<std::string, size_t> index;
  double total = 0;
  for (size_t i = 0; i < launches_.size() && i < launch_ns_.size(); ++i) {
    std::string label = node_label(graph_.node(launches_[i].node));
    auto [it, added] = index.emplace(label, rows.size());
    if (added) rows.emplace_back(0.0, label);
    rows[it->second].first += launch_ns_[i];
    total += launch_ns_[i];
  }
  std::sort(rows.rbegin(), rows.rend());
  std::ostringstream s;
  s.precision(3);
  // The first step is left out: it faults the arena's pages in.
  const double steps = double(steps_run_ - 1);
  s << std::fixed << "graph profile: " << steps_run_ - 1 << " steps after the first, "
    << total / 1e6 / steps << " ms/step in kernels\n";
  for (auto& [ns, label] : rows) {
    s << "  " << ns / 1e6 / steps << " ms  " << label << "\n";
  }
  const char* mode = std::getenv("KILN_GRAPH_PROFILE");
  if (mode != nullptr && std::string_view(mode) == "launches") {
    s << "per launch, in schedule order (inputs -> outputs):\n";
    for (size_t i = 0; i < launches_.size() && i < launch_ns_.size(); ++i) {
      const Node& node = graph_.node(launches_[i].node);
      s << "  " << launch_ns_[i] / 1e6 / steps << " ms  " << node_label(node);
      for (ValueId v : node.inputs) {
        if (v != kNoValue) s << " " << graph_.value(v).meta.shape.str();
      }
      s << " ->";
      for (ValueId v : node.outputs) s << " " << graph_.value(v).meta.shape.str();
      s << "\n";
    }
  }
  return s.str();
}

void Executable::bind() {
  if (!arena_holder_) arena_holder_ = options_.arena ? options_.arena : std::make_shared<Arena>();
  const size_t need = size_t(std::max<int64_t>(plan_.arena_bytes, 64));
  if (!arena_holder_->storage || arena_holder_->storage->bytes() < need) {
    launches_.clear();  // drop our references to the old arena before taking a new one
    bound_.clear();
    arena_.reset();
    arena_holder_->storage.reset();
    arena_holder_->storage = std::make_shared<Storage>(need);
  }
  arena_ = arena_holder_->storage;
  char* base = static_cast<char*>(arena_->data());
  bound_.assign(graph_.num_values(), Tensor());
  state_data_.clear();
  // Inputs read in place: bound to a storage that start() points at each step's batch.
  input_slots_.assign(graph_.inputs().size(), nullptr);
  input_stages_.resize(graph_.inputs().size());
  for (size_t i = 0; i < graph_.inputs().size(); ++i) {
    if (!inputs_in_place_[i]) continue;
    const ValueId v = graph_.inputs()[i];
    bound_[size_t(v)] = tensor_over(nullptr, graph_.value(v).meta, nullptr);
    input_slots_[i] = bound_[size_t(v)].impl()->storage;
  }
  for (size_t v = 0; v < graph_.num_values(); ++v) {
    const Value& val = graph_.value(ValueId(v));
    int b = plan_.buffer_of[v];
    if (b != MemoryPlan::kNone) {
      bound_[v] = tensor_over(base + plan_.buffers[size_t(b)].offset, val.meta, arena_);
    } else if (val.kind == ValueKind::state || val.kind == ValueKind::constant) {
      bound_[v] = val.tensor;
      if (val.kind == ValueKind::state && val.tensor.defined()) {
        state_data_.emplace_back(ValueId(v), val.tensor.impl()->storage->data());
      }
    }
  }
  launches_.clear();
  for (size_t position = 0; position < plan_.schedule.size(); ++position) {
    const NodeId n = plan_.schedule[position];
    const Node& node = graph_.node(n);
    Launch l;
    l.node = n;
    l.position = int(position);
    l.op = node.op;
    l.attrs = node.attrs;
    for (ValueId v : node.inputs) l.in.push_back(v == kNoValue ? Tensor() : bound_[size_t(v)]);
    if (is_view(node)) {
      const ops::OpDef& def = ops::op_def(node.op);
      ValueId out = node.outputs[0];
      if (view_aliases_[size_t(n)]) {
        Tensor y = def.view(l.in[0], node.attrs);
        if (y.impl()->storage != l.in[0].impl()->storage) {
          throw Error(std::string(def.name) + ": view copied at bind time but aliased when probed");
        }
        bound_[size_t(out)] = y;
        continue;  // no launch: the view is fixed for the arena's lifetime
      }
      l.out.push_back(bound_[size_t(out)]);
      bool reshape_like = node.op == ops::OpKind::reshape || node.op == ops::OpKind::contiguous;
      l.kind = reshape_like ? Launch::Kind::copy_reshape : Launch::Kind::view_copy;
      l.view = def.view;
      if (reshape_like) {
        // The copy walks the input in logical order into the output's memory viewed with the
        // input's shape: exactly what a row-major reshape of a copy means.
        const Tensor& o = l.out[0];
        l.out[0] = o.view_as(l.in[0].shape(), contiguous_strides(l.in[0].shape()), o.offset());
      }
    } else {
      for (ValueId v : node.outputs) l.out.push_back(bound_[size_t(v)]);
      switch (node.type) {
        case NodeType::op: {
          const ops::OpDef& def = ops::op_def(node.op);
          l.kernel = def.kernel;
          l.kind = Launch::Kind::kernel;
          // An output written over one of its inputs: run through the pointwise engine, which
          // is safe for that (the op's own kernel might not be).
          if (def.tile && node.outputs.size() == 1) {
            int ob = plan_.buffer_of[size_t(node.outputs[0])];
            for (ValueId v : node.inputs) {
              if (ob != MemoryPlan::kNone &&
                  plan_.buffer_of[size_t(plan_.alias_of[size_t(v)])] == ob) {
                l.kind = Launch::Kind::pointwise;
              }
            }
          }
          l.reseed = node.op == ops::OpKind::dropout && node.attrs.training;
          // Products get their oneDNN primitive built now, not looked up every step.
          static const bool no_precompile = std::getenv("KILN_GRAPH_NO_PRECOMPILE") != nullptr;
          if ((node.op == ops::OpKind::conv2d || node.op == ops::OpKind::matmul) &&
              !no_precompile && can_precompile(node, l.in, l.out)) {
            l.kind = Launch::Kind::special;
            l.special = make_epilogue_kernel(node, l.in, l.out);
          }
          if (!no_precompile && can_run_max_pool_grad(node, l.in, l.out)) {
            l.kind = Launch::Kind::special;
            l.special = make_max_pool_grad_kernel(node, l.in, l.out);
          }
          break;
        }
        case NodeType::fused_elementwise:
          l.kind = Launch::Kind::fused;
          l.fused = std::make_shared<FusedElementwise>(node.chain);
          break;
        default:
          l.kind = Launch::Kind::special;
          l.special = make_special_kernel(node, l.in, l.out);
          break;
      }
      // Blocked activations meeting per-(sample, channel) values: the plain engines would map
      // positions through the wrong layout.
      if (runs_blocked_spatial(node, l.in, l.out)) {
        l.kind = Launch::Kind::special;
        l.special = make_blocked_spatial_kernel(node, l.in, l.out);
        l.fused.reset();
      }
    }
    for (const Tensor& t : l.out) l.out_data.push_back(t.defined() ? t.raw_data() : nullptr);
    launches_.push_back(std::move(l));
  }
  report_.launches = launches_.size();
  place_workspaces();
  find_input_followers();
  first_update_ = launches_.size();
  if (options_.updates_last) {
    for (size_t i = 0; i < launches_.size(); ++i) {
      if (passes::is_optimizer_update(graph_.node(launches_[i].node))) {
        first_update_ = i;
        break;
      }
    }
    // What run_until_updates() returns must be computed before the first update.
    std::vector<int> position(graph_.num_nodes(), -1);
    for (size_t i = 0; i < plan_.schedule.size(); ++i) position[size_t(plan_.schedule[i])] = int(i);
    const int first = first_update_ < launches_.size()
                          ? position[size_t(launches_[first_update_].node)]
                          : int(plan_.schedule.size());
    for (ValueId v : graph_.outputs()) {
      NodeId producer = graph_.value(v).producer;
      if (producer >= 0 && position[size_t(producer)] >= first) {
        throw Error("compiled graph: output " + std::to_string(v) + " (" +
                    node_label(graph_.node(producer)) +
                    ") is computed after the first optimizer update (updates_last)");
      }
    }
  }
  profile_ = std::getenv("KILN_GRAPH_PROFILE") != nullptr;
  launch_ns_.assign(launches_.size(), 0.0);
}

void Executable::place_workspaces() {
  std::erase_if(plan_.workspaces, [](const MemoryPlan::Workspace& w) { return !w.reserved; });
  std::vector<std::pair<Launch*, int64_t>> outside;  // found no gap in the arena
  int64_t outside_bytes = 0;
  report_.workspace_bytes = 0;
  for (Launch& l : launches_) {
    l.workspace = {};
    if (!l.special) continue;
    const int64_t bytes = int64_t(l.special->workspace_bytes() + 63) / 64 * 64;
    if (bytes == 0) continue;
    report_.workspace_bytes = std::max(report_.workspace_bytes, bytes);
    int64_t at = MemoryPlan::kNone;
    for (const MemoryPlan::Workspace& w : plan_.workspaces) {
      if (w.reserved && w.position == l.position && w.bytes >= bytes) at = w.offset;
    }
    if (at == MemoryPlan::kNone) at = place_workspace(plan_, l.position, bytes);
    if (at != MemoryPlan::kNone) {
      l.workspace = {static_cast<std::byte*>(arena_->data()) + at, size_t(bytes)};
    } else {
      outside.emplace_back(&l, bytes);
      outside_bytes = std::max(outside_bytes, bytes);
    }
  }
  if (options_.check_plan) check_memory_plan(plan_);
  // Kernels never run at the same time, so one buffer serves all that found no gap.
  report_.workspace_outside_arena = outside_bytes;
  if (outside_bytes == 0) {
    workspace_.reset();
  } else if (!workspace_ || int64_t(workspace_->bytes()) < outside_bytes) {
    workspace_ = std::make_shared<Storage>(size_t(outside_bytes));
  }
  for (auto [l, bytes] : outside) {
    l->workspace = {static_cast<std::byte*>(workspace_->data()), size_t(bytes)};
  }
  for (Launch& l : launches_) {
    if (!l.workspace.empty()) l.special->set_workspace(l.workspace.data());
  }
}

void Executable::find_input_followers() {
  std::vector<int> input_index(graph_.num_values(), -1);
  for (size_t i = 0; i < graph_.inputs().size(); ++i) {
    if (inputs_in_place_[i]) input_index[size_t(graph_.inputs()[i])] = int(i);
  }
  input_followers_.assign(graph_.inputs().size(), {});
  input_unfollowed_.assign(graph_.inputs().size(), false);
  for (Launch& l : launches_) {
    if (!l.special) continue;  // the other kinds take their tensors' addresses as they run
    for (ValueId v : graph_.node(l.node).inputs) {
      const int i = v == kNoValue ? -1 : input_index[size_t(plan_.alias_of[size_t(v)])];
      if (i < 0) continue;
      std::vector<SpecialKernel*>& followers = input_followers_[size_t(i)];
      if (!l.special->follows_moved_inputs()) {
        input_unfollowed_[size_t(i)] = true;
      } else if (std::find(followers.begin(), followers.end(), l.special.get()) ==
                 followers.end()) {
        followers.push_back(l.special.get());
      }
    }
  }
}

bool Executable::copy_inputs_kernels_cannot_follow() {
  bool changed = false;
  for (size_t i = 0; i < inputs_in_place_.size(); ++i) {
    if (inputs_in_place_[i] && input_unfollowed_[i]) {
      inputs_in_place_[i] = false;
      changed = true;
    }
  }
  return changed;
}

void Executable::take_inputs(std::span<const Tensor> inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& bound = bound_[size_t(graph_.inputs()[i])];
    if (!inputs_in_place_[i]) {
      bound.copy_from(inputs[i]);
      continue;
    }
    // Kernels were built for the graph's strides and may assume the arena's 64-byte alignment:
    // a batch without both is staged in a buffer of our own first. So is a batch in the memory
    // of graph state (a parameter passed as input), which the step's updates change.
    const Tensor* from = &inputs[i];
    if (inputs[i].strides() != bound.strides() ||
        reinterpret_cast<uintptr_t>(inputs[i].raw_data()) % 64 != 0 ||
        is_state_memory(*inputs[i].impl()->storage)) {
      Tensor& stage = input_stages_[i];
      if (!stage.defined())
        stage = Tensor::empty_strided(bound.shape(), bound.strides(), bound.dtype());
      stage.copy_from(inputs[i]);
      from = &stage;
    }
    Storage& slot = *input_slots_[i];
    const bool moved = from->raw_data() != slot.data();
    slot.borrow(from->raw_data(), from->impl()->storage);
    if (moved) {
      for (SpecialKernel* k : input_followers_[i]) k->inputs_moved();
    }
  }
}

bool Executable::is_state_memory(const Storage& storage) const {
  for (const auto& [v, data] : state_data_) {
    if (data == storage.data()) return true;
  }
  return false;
}

void Executable::release_inputs() {
  // The address stays, to notice when the next batch lands elsewhere; the batch is the caller's
  // again.
  for (const std::shared_ptr<Storage>& slot : input_slots_) {
    if (slot) slot->borrow(slot->data(), nullptr);
  }
}

bool Executable::accepts(std::span<const Tensor> inputs) const {
  if (inputs.size() != graph_.inputs().size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ops::TensorMeta& m = graph_.value(graph_.inputs()[i]).meta;
    if (inputs[i].shape() != m.shape || inputs[i].dtype() != m.dtype) return false;
  }
  return true;
}

void Executable::check_bindings() {
  if (arena_holder_->storage != arena_) {
    bind();  // another graph grew the shared arena
    return;
  }
  for (const auto& [v, data] : state_data_) {
    if (graph_.value(v).tensor.impl()->storage->data() != data) {
      bind();  // someone gave a parameter new memory: rebind (rare; costs no recompile)
      return;
    }
  }
}

void Executable::start(std::span<const Tensor> inputs) {
  if (inputs.size() != graph_.inputs().size()) {
    throw Error("compiled graph: expects " + std::to_string(graph_.inputs().size()) +
                " inputs, got " + std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    ValueId v = graph_.inputs()[i];
    const ops::TensorMeta& m = graph_.value(v).meta;
    if (inputs[i].shape() != m.shape || inputs[i].dtype() != m.dtype) {
      throw ShapeError("compiled graph: input " + std::to_string(i) + " (" + graph_.value(v).name +
                       ") is " + describe(inputs[i]) + " but the graph was compiled for " +
                       std::string(dtype_name(m.dtype)) + m.shape.str() + " (recompile)");
    }
  }
  updates_pending_ = false;
  check_bindings();
  ops::NoGradGuard no_grad;
  take_inputs(inputs);
  ++steps_run_;
}

void Executable::launch(size_t begin, size_t end) {
  ops::NoGradGuard no_grad;
  for (size_t li = begin; li < end; ++li) {
    Launch& l = launches_[li];
    auto lt0 =
        profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    switch (l.kind) {
      case Launch::Kind::kernel:
        if (l.reseed) l.attrs.seed = int64_t(default_generator().next_u64() >> 1);
        l.kernel(l.in, l.out, l.attrs);
        break;
      case Launch::Kind::pointwise:
        ops::pointwise_kernel(l.op, l.in, l.out, l.attrs);
        break;
      case Launch::Kind::fused:
        l.fused->run(l.in, l.out[0]);
        break;
      case Launch::Kind::copy_reshape:
        ops::strided_copy(l.in[0], l.out[0]);
        break;
      case Launch::Kind::view_copy:
        l.out[0].copy_from(l.view(l.in[0], l.attrs));
        break;
      case Launch::Kind::special:
        if (options_.poison_workspaces && !l.workspace.empty()) {
          std::memset(l.workspace.data(), 0xFF, l.workspace.size());
        }
        l.special->run(l.in, l.out);
        break;
    }
    if (profile_ && steps_run_ > 1) {
      launch_ns_[li] +=
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - lt0).count();
    }
    for (size_t j = 0; j < l.out.size(); ++j) {
      if (l.out[j].defined() && l.out[j].raw_data() != l.out_data[j]) {
        throw Error(std::string(node_label(graph_.node(l.node))) +
                    ": the kernel replaced its output tensor instead of writing into it");
      }
    }
  }
}

std::vector<Tensor> Executable::outputs() const {
  ops::NoGradGuard no_grad;
  std::vector<Tensor> result;
  for (ValueId v : graph_.outputs()) result.push_back(bound_[size_t(v)].clone());
  return result;
}

std::vector<Tensor> Executable::run(std::span<const Tensor> inputs) {
  start(inputs);
  launch(0, launches_.size());
  std::vector<Tensor> result = outputs();
  release_inputs();
  return result;
}

std::vector<Tensor> Executable::run_until_updates(std::span<const Tensor> inputs) {
  if (!options_.updates_last) {
    throw Error("compiled graph: run_until_updates() needs a graph compiled with updates_last");
  }
  start(inputs);
  launch(0, first_update_);
  updates_pending_ = true;
  return outputs();
}

void Executable::run_updates() {
  if (!updates_pending_) {
    throw Error("compiled graph: run_updates() without a run_until_updates() before it");
  }
  updates_pending_ = false;
  launch(first_update_, launches_.size());
  release_inputs();
}

}  // namespace kiln::graph
