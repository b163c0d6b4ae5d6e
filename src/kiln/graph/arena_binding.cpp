// Arena binding: every value of the compiled graph bound to its place in the arena (or to the
// state tensor it stands for), and the list of launches built once with those tensors; kernels'
// scratch placed into the arena's gaps; which kernels follow a graph input read in place.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/kernel_threads.h"
#include "kiln/core/threads.h"
#include "kiln/graph/detail/executor_internal.h"
#include "kiln/graph/detail/passes.h"
#include "kiln/graph/dump.h"

namespace kiln::graph {
namespace {

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

}  // namespace

namespace detail {

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

}  // namespace detail

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
  const int budget = options_.kernel_threads > 0 ? options_.kernel_threads : num_threads();
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
      const double bytes = 2.0 * double(l.out[0].nbytes());  // read once, written once
      l.threads = options_.threads_per_launch
                      ? threads_for({.bytes = bytes}, budget, machine_thread_model())
                      : budget;
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
      if (options_.threads_per_launch) {
        const ops::Cost cost = detail::node_cost(graph_, node);
        l.threads =
            threads_for({.flops = cost.flops, .bytes = cost.bytes}, budget, machine_thread_model());
      } else {
        l.threads = budget;
      }
      // Kernels built now (oneDNN primitives, per-thread scratch) are built for the team they
      // will run with.
      KernelThreads team(l.threads);
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
          l.reseed = node.op == ops::OpKind::dropout && node.attrs.as<ops::DropoutAttrs>().training;
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
      }
    }
    for (const Tensor& t : l.out) l.out_data.push_back(t.defined() ? t.raw_data() : nullptr);
    launches_.push_back(std::move(l));
  }
  report_.launches = launches_.size();
  place_workspaces();
  find_input_followers();
  find_state_writes();
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

}  // namespace kiln::graph
