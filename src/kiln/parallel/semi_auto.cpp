#include "kiln/parallel/semi_auto.h"

#include <mutex>
#include <set>

#include "kiln/comm/communicator.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel_context.h"
#include "kiln/ops/comm/collectives.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/dispatch_chain.h"
#include "kiln/ops/functional.h"
#include "kiln/parallel/auto_parallel.h"
#include "kiln/parallel/data_parallel.h"

namespace kiln::parallel {
namespace {

// The tensors split so far (parameters and their optimizer state), by their shared impl, and
// those whose initial values were already taken from rank 0. Each registered impl is kept alive
// until forget_sharded_parameters: a freed one's address, reused by a new tensor (an optimizer
// state made after the first plan), would pass that tensor for registered on some ranks and not
// others, and the ranks' broadcasts would no longer match (a hang, 1 run in 4 of 4 ranks here).
struct Registry {
  std::mutex mutex;
  std::map<const TensorImpl*, TensorLayout> split;
  std::set<const TensorImpl*> synced;
  std::vector<std::shared_ptr<TensorImpl>> registered;
};
Registry& registry() {
  static Registry r;
  return r;
}

// While tracing the logical graph, split tensors show their whole shapes (no kernel runs while
// tracing, so their data is never read at those shapes).
class WholeShapes {
 public:
  explicit WholeShapes(const std::vector<nn::NamedTensor>& tensors) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& [name, t] : tensors) {
      auto it = r.split.find(t.impl());
      if (it == r.split.end()) continue;
      saved_.push_back({t, t.impl()->shape, t.impl()->strides});
      t.impl()->shape = it->second.shape;
      t.impl()->strides = contiguous_strides(it->second.shape);
    }
  }
  ~WholeShapes() {
    for (Saved& s : saved_) {
      s.tensor.impl()->shape = s.shape;
      s.tensor.impl()->strides = s.strides;
    }
  }

 private:
  struct Saved {
    Tensor tensor;
    Shape shape;
    Strides strides;
  };
  std::vector<Saved> saved_;
};

// Replaces t's data by this rank's block of it under `layout` (t shares its impl with the
// network and the optimizer, which then see the block).
void keep_block(const Tensor& t, const TensorLayout& layout) {
  ops::NoGradGuard no_grad;
  const Redistribution r = plan_redistribution(
      TensorLayout::replicated(layout.shape, layout.ranks()), layout, comm::rank(), t.dtype());
  const Tensor block = apply_redistribution(t.detach(), r).clone();
  TensorImpl* impl = t.impl();
  impl->storage = block.impl()->storage;
  impl->offset = block.offset();
  impl->shape = block.shape();
  impl->strides = block.strides();
}

void register_split(const Tensor& t, const TensorLayout& layout) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.split.emplace(t.impl(), layout).second) r.registered.push_back(t.impl_ptr());
}

std::vector<int64_t> same_block_group(const TensorLayout& layout, int64_t rank) {
  const std::vector<int64_t> mine = layout.block_of(rank);
  std::vector<int64_t> group;
  for (int64_t r = 0; r < layout.ranks(); ++r) {
    if (layout.block_of(r) == mine) group.push_back(r);
  }
  return group;
}

}  // namespace

bool semi_auto_active() {
  const ParallelMode mode = get_auto_parallel_context().parallel_mode;
  return mode == ParallelMode::SEMI_AUTO_PARALLEL || mode == ParallelMode::AUTO_PARALLEL;
}

bool auto_parallel_active() {
  return get_auto_parallel_context().parallel_mode == ParallelMode::AUTO_PARALLEL;
}

int64_t semi_auto_ranks() {
  const int64_t ranks = comm::size();
  const int device_num = get_auto_parallel_context().device_num;
  if (device_num > 0 && device_num != ranks) {
    throw Error(detail::concat(auto_parallel_active() ? "AUTO_PARALLEL" : "SEMI_AUTO_PARALLEL",
                               ": device_num is ", device_num, " but the job has ", ranks,
                               " ranks; set device_num to the job's size (or 0)"));
  }
  return ranks;
}

std::unique_ptr<LogicalStep> trace_logical_step(
    const ops::TensorMeta& images, const ops::TensorMeta& labels,
    const std::function<std::pair<Tensor, Tensor>(const Tensor&, const Tensor&)>& forward,
    const std::vector<nn::NamedTensor>& params) {
  auto step = std::make_unique<LogicalStep>();
  graph::Tracer tracer(step->graph);
  tracer.bind_state(params);
  const Tensor x = tracer.input(images, "images");
  const Tensor y = tracer.input(labels, "labels");
  const auto [logits, loss] = forward(x, y);
  step->logits = tracer.value_of(logits);
  step->loss = tracer.value_of(loss);
  tracer.add_output(logits);
  tracer.add_output(loss);
  tracer.finish();
  return step;
}

std::unique_ptr<LogicalStep> plan_step(
    const ops::TensorMeta& images, const ops::TensorMeta& labels,
    const std::function<std::pair<Tensor, Tensor>(const Tensor&, const Tensor&)>& forward,
    const std::vector<nn::NamedTensor>& params, const std::vector<nn::NamedTensor>& optimizer_state,
    const std::vector<Tensor>& optimizer_params, const MachineModel& machine) {
  const int64_t ranks = semi_auto_ranks();
  std::vector<nn::NamedTensor> all = params;
  all.insert(all.end(), optimizer_state.begin(), optimizer_state.end());
  std::unique_ptr<LogicalStep> step;
  {
    WholeShapes whole(all);
    step = trace_logical_step(images, labels, forward, params);
  }

  std::map<graph::ValueId, TensorLayout> fixed;
  for (size_t v = 0; v < step->graph.num_values(); ++v) {
    const graph::Value& value = step->graph.value(graph::ValueId(v));
    if (value.kind != graph::ValueKind::state) continue;
    if (const TensorLayout* l = sharded_layout(value.tensor)) fixed.emplace(graph::ValueId(v), *l);
  }
  std::map<graph::ValueId, TensorLayout> held = fixed;
  std::map<graph::NodeId, std::string> searched;
  if (auto_parallel_active()) {
    const AutoParallelContext& context = get_auto_parallel_context();
    AutoParallelOptions options;
    options.search = parse_search_mode(context.search_mode);
    options.memory_limit_bytes = context.memory_limit_mb * double(1 << 20);
    options.gradient_bucket_bytes = context.bucket_cap_mb * double(1 << 20);
    options.optimizer_states =
        optimizer_params.empty() ? 0 : int(optimizer_state.size() / optimizer_params.size());
    options.machine = machine;
    const AutoPlan plan = plan_auto_parallel(step->graph, step->loss, ranks, options, fixed);
    for (const auto& [id, choice] : plan.ops) {
      step->graph.node(id).strategy = choice.strategy;
      searched[id] = "chosen by the search: " + choice.what;
    }
    for (const auto& [v, layout] : plan.parameters) held.emplace(v, layout);
    step->auto_text = plan.str(step->graph);
    step->predicted = plan.predicted;
  }
  step->plan = plan_sharding(step->graph, ranks, held, machine.comm, searched);

  // Every rank starts from rank 0's whole values, once, before anything is split. Planning reads
  // only shapes, so a plan that fails does so on every rank before any collective.
  {
    std::vector<nn::NamedTensor> fresh;
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& list : {params, optimizer_state}) {
      for (const auto& [name, t] : list) {
        if (r.synced.insert(t.impl()).second) {
          r.registered.push_back(t.impl_ptr());
          fresh.emplace_back(name, t);
        }
      }
    }
    if (ranks > 1 && !fresh.empty()) broadcast_from_rank0(fresh);
  }

  // Keep this rank's block of each newly split parameter and of its optimizer state.
  for (size_t v = 0; v < step->graph.num_values(); ++v) {
    const graph::Value& value = step->graph.value(graph::ValueId(v));
    const TensorLayout& layout = *step->plan.held[v];
    if (value.kind != graph::ValueKind::state || layout.is_replicated() || fixed.count(int(v))) {
      continue;
    }
    if (layout.is_partial()) throw Error("SEMI_AUTO_PARALLEL: a parameter cannot be partial");
    for (size_t i = 0; i < optimizer_params.size(); ++i) {
      if (!optimizer_params[i].same(value.tensor)) continue;
      const std::string suffix = "." + std::to_string(i);
      for (const auto& [name, t] : optimizer_state) {
        if (name.size() > suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
            t.shape() == layout.shape && !sharded_layout(t)) {
          keep_block(t, layout);
          register_split(t, layout);
        }
      }
    }
    keep_block(value.tensor, layout);
    register_split(value.tensor, layout);
  }
  step->plan_text = step->plan.str(step->graph, comm::rank());
  return step;
}

std::pair<Tensor, Tensor> trace_local_step(graph::Tracer&, const LogicalStep& step,
                                           const Tensor& images, const Tensor& labels,
                                           bool whole_logits) {
  const graph::Graph& g = step.graph;
  const ShardingPlan& plan = step.plan;
  const int64_t rank = comm::rank();
  std::vector<Tensor> local(g.num_values());
  local[size_t(g.inputs().at(0))] = images;
  local[size_t(g.inputs().at(1))] = labels;
  for (size_t v = 0; v < g.num_values(); ++v) {
    const graph::Value& value = g.value(graph::ValueId(v));
    if (value.kind == graph::ValueKind::state || value.kind == graph::ValueKind::constant) {
      local[v] = value.tensor;
    }
  }
  for (graph::NodeId id : g.schedule()) {
    const graph::Node& n = g.node(id);
    const OpPlan& p = *plan.ops[size_t(id)];
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const graph::ValueId v = n.inputs[i];
      const TensorLayout& held = *plan.held[size_t(v)];
      Tensor t = local[size_t(v)];
      if (!held.same_placement(p.inputs[i])) {
        t = apply_redistribution(
            t, plan_redistribution(held, p.inputs[i], rank, g.value(v).meta.dtype));
      }
      inputs.push_back(t);
    }
    std::vector<Tensor> outputs = ops::call(n.op, inputs, p.form.local_attrs);
    if (p.form.output_scale != 1.0) outputs[0] = ops::mul_scalar(outputs[0], p.form.output_scale);
    for (size_t o = 0; o < n.outputs.size(); ++o) local[size_t(n.outputs[o])] = outputs[o];
  }
  auto whole = [&](graph::ValueId v) {
    const TensorLayout& held = *plan.held[size_t(v)];
    const TensorLayout target = TensorLayout::replicated(held.shape, plan.ranks);
    if (held.same_placement(target)) return local[size_t(v)];
    return apply_redistribution(local[size_t(v)],
                                plan_redistribution(held, target, rank, g.value(v).meta.dtype));
  };
  return {whole_logits ? whole(step.logits) : local[size_t(step.logits)], whole(step.loss)};
}

Tensor backward_seed(const Tensor& loss) {
  return Tensor::full(loss.shape(), 1.0 / double(semi_auto_ranks()), loss.dtype());
}

std::vector<Tensor> reduce_replicated_gradients(const std::vector<Tensor>& grads,
                                                const std::vector<Tensor>& params) {
  const int64_t ranks = semi_auto_ranks();
  std::vector<Tensor> out(grads.size());
  // Gradients every rank holds alike go in data parallelism's buckets (one all-reduce per bucket,
  // started as the backward makes its last gradient); those of smaller groups one by one.
  std::vector<size_t> whole_job;
  std::vector<Tensor> whole_job_grads;
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorLayout* l = sharded_layout(params[i]);
    const TensorLayout layout = l ? *l : TensorLayout::replicated(params[i].shape(), ranks);
    const std::vector<int64_t> group = same_block_group(layout, comm::rank());
    if (group.size() <= 1) {
      out[i] = grads[i];
    } else if (int64_t(group.size()) == ranks && grads[i].dtype() == DType::f32) {
      whole_job.push_back(i);
      whole_job_grads.push_back(grads[i]);
    } else {
      out[i] = ops::all_reduce(grads[i], ops::CollectiveReduction::sum,
                               int64_t(group.size()) == ranks ? std::vector<int64_t>{} : group);
    }
  }
  if (!whole_job_grads.empty()) {
    const std::vector<Tensor> reduced = trace_gradient_all_reduce(whole_job_grads, 1.0);
    for (size_t k = 0; k < whole_job.size(); ++k) out[whole_job[k]] = reduced[k];
  }
  return out;
}

const TensorLayout* sharded_layout(const Tensor& t) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.split.find(t.impl());
  return it == r.split.end() ? nullptr : &it->second;
}

Tensor gather_whole(const Tensor& t) {
  const TensorLayout* l = sharded_layout(t);
  if (!l) return t.clone();
  ops::NoGradGuard no_grad;
  const TensorLayout target = TensorLayout::replicated(l->shape, l->ranks());
  return apply_redistribution(t.detach(), plan_redistribution(*l, target, comm::rank(), t.dtype()))
      .clone();
}

std::vector<nn::NamedTensor> gather_whole(const std::vector<nn::NamedTensor>& tensors) {
  std::vector<nn::NamedTensor> out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, gather_whole(t));
  return out;
}

void forget_sharded_parameters() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.split.clear();
  r.synced.clear();
  r.registered.clear();
}

}  // namespace kiln::parallel
