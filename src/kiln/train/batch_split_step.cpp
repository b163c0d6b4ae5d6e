#include "kiln/train/batch_split_step.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>

#include "kiln/amp/autocast.h"
#include "kiln/autograd/tape.h"
#include "kiln/core/error.h"
#include "kiln/core/kernel_threads.h"
#include "kiln/graph/autodiff.h"
#include "kiln/graph/tracer.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"
#include "kiln/train/compiled_step.h"

namespace kiln::train {

std::string batch_split_refusal(const graph::Graph& g, const nn::LossCell& loss, int64_t batch,
                                int slices) {
  if (slices < 2) return "one thread";
  if (batch % slices != 0) {
    return "a batch of " + std::to_string(batch) + " does not split into " +
           std::to_string(slices) + " equal slices";
  }
  const std::optional<nn::Reduction> reduction = loss.batch_reduction();
  if (reduction != nn::Reduction::mean && reduction != nn::Reduction::sum) {
    return "the loss is not the mean or the sum over the batch's samples";
  }
  for (size_t n = 0; n < g.num_nodes(); ++n) {
    const graph::Node& node = g.node(graph::NodeId(n));
    if (node.op == ops::OpKind::dropout && node.attrs.as<ops::DropoutAttrs>().training) {
      return "dropout draws one mask for the whole batch";
    }
  }
  return {};
}

namespace {

bool is_training_batch_norm(const graph::Node& node) {
  return node.type == graph::NodeType::op && node.op == ops::OpKind::batch_norm &&
         node.attrs.as<ops::BatchNormAttrs>().training;
}

// Makes every BatchNorm in training of the traced forward `g` combine its statistics across the
// `slices` slices of the batch; returns how many there are. Before autodiff, which copies the
// setting into their gradients.
int share_batch_statistics(graph::Graph& g, int slices) {
  int marked = 0;
  for (size_t n = 0; n < g.num_nodes(); ++n) {
    graph::Node& node = g.node(graph::NodeId(n));
    if (!is_training_batch_norm(node)) continue;
    ops::BatchNormAttrs a = node.attrs.as<ops::BatchNormAttrs>();
    a.batch_slices = slices;
    node.attrs = a;
    ++marked;
  }
  return marked;
}

Tensor batch_slice(const Tensor& t, int i, int slices) {
  const int64_t size = t.dim(0) / slices;
  return ops::slice(t, 0, i * size, (i + 1) * size);
}

ops::TensorMeta slice_meta(const Tensor& t, int slices) {
  ops::TensorMeta m = ops::meta_of(t);
  Shape s = m.shape;
  s[0] /= slices;
  m.shape = s;
  return m;
}

nn::Tensors batch_slices(const nn::Tensors& inputs, int i, int slices) {
  nn::Tensors out;
  for (const Tensor& x : inputs) out.push_back(batch_slice(x, i, slices));
  return out;
}

// The traced network's inputs, shaped as `inputs` divided into `slices` along the batch.
nn::Tensors trace_inputs(graph::Tracer& tracer, const nn::Tensors& inputs, int slices) {
  std::vector<ops::TensorMeta> metas;
  for (const Tensor& x : inputs)
    metas.push_back(slices == 1 ? ops::meta_of(x) : slice_meta(x, slices));
  return trace_network_inputs(tracer, metas);
}

// The network's forward and loss on a batch shaped as `inputs` and `labels`, traced.
graph::Graph trace_forward(nn::Cell& net, nn::LossCell& loss, const nn::Tensors& inputs,
                           const Tensor& labels) {
  graph::Graph g;
  graph::Tracer tracer(g);
  tracer.bind_state(net.state_and_names());
  const nn::Tensors xs = trace_inputs(tracer, inputs, 1);
  const Tensor y = tracer.input(ops::meta_of(labels), "labels");
  tracer.add_output(loss(net.first_output(xs), y));
  tracer.finish();
  return g;
}

int64_t batch_of(const nn::Tensors& inputs) {
  return !inputs.empty() && inputs[0].rank() > 0 ? inputs[0].dim(0) : 0;
}

}  // namespace

std::string graph_batch_split_refusal(nn::Cell& net, nn::LossCell& loss, const nn::Tensors& inputs,
                                      const Tensor& labels, int slices) {
  if (slices < 2) return "one thread";
  return batch_split_refusal(trace_forward(net, loss, inputs, labels), loss, batch_of(inputs),
                             slices);
}

std::string eager_batch_split_refusal(nn::Cell& net, nn::LossCell& loss, const nn::Tensors& inputs,
                                      const Tensor& labels, int slices) {
  if (slices < 2) return "one thread";
  const graph::Graph g = trace_forward(net, loss, inputs, labels);
  // Eager slices run on the tape, whose BatchNorm calls do not meet across threads (graph mode's
  // slices do: share_batch_statistics).
  for (size_t n = 0; n < g.num_nodes(); ++n) {
    if (is_training_batch_norm(g.node(graph::NodeId(n)))) {
      return "BatchNorm in training normalizes with the whole batch's statistics, which eager "
             "mode's slices do not combine";
    }
  }
  return batch_split_refusal(g, loss, batch_of(inputs), slices);
}

std::pair<Tensor, std::vector<Tensor>> eager_split_loss_and_gradients(
    nn::Cell& net, nn::LossCell& loss, const std::vector<Tensor>& params, const amp::AmpConfig& amp,
    const nn::Tensors& inputs, const Tensor& labels, int slices) {
  const bool mean = loss.batch_reduction() == nn::Reduction::mean;
  std::vector<Tensor> losses(static_cast<size_t>(slices));
  std::vector<std::vector<Tensor>> grads(static_cast<size_t>(slices));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(slices));
#pragma omp parallel for num_threads(slices) schedule(static, 1)
  for (int i = 0; i < slices; ++i) {
    try {
      KernelThreads alone(1);
      Tensor l;
      {
        std::optional<amp::AutocastScope> autocast;  // per thread, as the tape's grad mode
        if (amp.level != amp::AmpLevel::O0) autocast.emplace(amp);
        l = loss(net.first_output(batch_slices(inputs, i, slices)), batch_slice(labels, i, slices));
      }
      if (mean) l = ops::mul_scalar(l, 1.0 / slices);
      grads[size_t(i)] = autograd::grad(l, params);
      losses[size_t(i)] = l;
    } catch (...) {
      errors[size_t(i)] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  ops::NoGradGuard no_grad;
  Tensor total = losses[0];
  std::vector<Tensor> sum = grads[0];
  for (int i = 1; i < slices; ++i) {
    total = ops::add(total, losses[size_t(i)]);
    for (size_t p = 0; p < sum.size(); ++p) sum[p] = ops::add(sum[p], grads[size_t(i)][p]);
  }
  return {total, sum};
}

BatchSplitStep::BatchSplitStep(nn::Cell& net, nn::LossCell& loss, optim::Optimizer& opt,
                               const graph::CompileOptions& options, const amp::AmpConfig& amp,
                               const nn::Tensors& inputs, const Tensor& labels, int slices)
    : group_(std::make_unique<ThreadGroup>(slices)) {
  for (const Tensor& x : inputs) batch_.push_back(ops::meta_of(x));
  batch_.push_back(ops::meta_of(labels));
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Tensor> params = opt.parameters();
  const bool mean = loss.batch_reduction() == nn::Reduction::mean;
  // The slice's forward and backward: outputs its loss (weighted so that the slices' losses add
  // up to the batch's) and its parameters' gradients.
  auto trace_slice_step = [&] {
    graph::Graph g;
    graph::Tracer tracer(g);
    tracer.bind_state(traced_step_state(net, opt));
    const nn::Tensors xs = trace_inputs(tracer, inputs, slices);
    const Tensor y = tracer.input(slice_meta(labels, slices), "labels");
    Tensor slice_loss;
    {
      amp::AutocastScope autocast(amp);
      slice_loss = loss(net.first_output(xs), y);
    }
    shared_statistics_ = share_batch_statistics(g, slices);
    if (mean) slice_loss = ops::mul_scalar(slice_loss, 1.0 / slices);
    const std::vector<Tensor> grads = graph::gradients(tracer, slice_loss, params);
    tracer.add_output(slice_loss);
    for (const Tensor& grad : grads) tracer.add_output(grad);
    tracer.finish();
    return g;
  };
  for (int i = 0; i < slices; ++i) {
    graph::CompileOptions o = options;
    o.arena = std::make_shared<graph::Arena>();  // the slices run at the same time
    o.kernel_threads = 1;
    o.micro_batches = 1;
    o.updates_last = false;
    o.dump_name = options.dump_name + "_slice" + std::to_string(i);
    slice_steps_.push_back(std::make_unique<graph::Executable>(trace_slice_step(), o));
  }
  // The update: the slices' losses and gradients as inputs, summed, then the optimizer once.
  const graph::Graph& slice_graph = slice_steps_[0]->graph();
  graph::Graph g;
  {
    graph::Tracer tracer(g);
    tracer.bind_state(traced_step_state(net, opt));
    Tensor total;
    std::vector<Tensor> grads(params.size());
    for (int i = 0; i < slices; ++i) {
      const std::string slice = "slice" + std::to_string(i);
      const std::vector<graph::ValueId>& outs = slice_graph.outputs();
      const Tensor slice_loss = tracer.input(slice_graph.value(outs[0]).meta, slice + ".loss");
      total = i == 0 ? slice_loss : ops::add(total, slice_loss);
      for (size_t p = 0; p < params.size(); ++p) {
        const Tensor grad =
            tracer.input(slice_graph.value(outs[p + 1]).meta, slice + ".grad" + std::to_string(p));
        grads[p] = i == 0 ? grad : ops::add(grads[p], grad);
      }
    }
    opt.apply(grads);
    tracer.add_output(total);
    tracer.finish();
  }
  graph::CompileOptions o = options;
  o.micro_batches = 1;
  o.updates_last = false;
  // The slices' threads run the update too, each its share of the parameters' updates.
  o.concurrent_groups = slices;
  o.dump_name = options.dump_name + "_update";
  update_ = std::make_unique<graph::Executable>(std::move(g), o);
  compile_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

BatchSplitStep::~BatchSplitStep() = default;

bool BatchSplitStep::accepts(const nn::Tensors& inputs, const Tensor& labels) const {
  if (inputs.size() + 1 != batch_.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].shape() != batch_[i].shape || inputs[i].dtype() != batch_[i].dtype) return false;
  }
  return labels.shape() == batch_.back().shape && labels.dtype() == batch_.back().dtype;
}

Tensor BatchSplitStep::run(const nn::Tensors& inputs, const Tensor& labels) {
  if (!accepts(inputs, labels)) {
    const std::string compiled = ops::describe_metas(batch_);
    throw ShapeError("batch-split step: compiled for inputs and labels " + compiled + ", got " +
                     describe_batch(inputs, labels));
  }
  const int slices = this->slices();
  // Slice i's graph inputs: its part of every network input, then of the labels.
  std::vector<std::vector<Tensor>> slice_inputs(static_cast<size_t>(slices));
  for (int i = 0; i < slices; ++i) {
    slice_inputs[size_t(i)] = batch_slices(inputs, i, slices);
    slice_inputs[size_t(i)].push_back(batch_slice(labels, i, slices));
  }
  std::vector<std::vector<Tensor>> outs(static_cast<size_t>(slices));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(slices));
  std::atomic<int> first_failure{-1};  // the others may fail only because it did
  auto fail = [&](int i) {
    errors[size_t(i)] = std::current_exception();
    int none = -1;
    first_failure.compare_exchange_strong(none, i);
  };
  std::vector<Tensor> update_inputs;
  auto collect_update_inputs = [&] {
    for (const std::vector<Tensor>& o : outs)
      update_inputs.insert(update_inputs.end(), o.begin(), o.end());
  };
  bool update_began = false;  // by the team's first thread, between two barriers
  group_->reset();
  // One team for the whole step; inside it every kernel of a slice runs on its slice's thread
  // (the slice graphs were bound for one thread; nested regions get one thread too). Then, when
  // the update formed a group per slice, the same threads run it, each its group.
#pragma omp parallel num_threads(slices)
  {
    const int team = omp_get_num_threads(), me = omp_get_thread_num();
    for (int i = me; i < slices; i += team) {
      try {
        if (team < slices && shared_statistics_ > 0) {
          throw Error(detail::concat("batch-split step: its ", slices, " slices meet at ",
                                     "BatchNorm, so they need as many threads; OpenMP gave ",
                                     team));
        }
        KernelThreads alone(1);
        ThreadGroup::Member member(*group_, i);
        outs[size_t(i)] = slice_steps_[size_t(i)]->run_in_arena(slice_inputs[size_t(i)]);
      } catch (...) {
        fail(i);
        group_->abort();  // nobody waits for this slice at a meeting it will not reach
      }
    }
    if (team == update_->num_groups()) {  // the same on every thread of the team
#pragma omp barrier
      if (me == 0 && first_failure.load() < 0) {
        try {
          collect_update_inputs();
          update_->begin_groups(update_inputs);
          update_began = true;
        } catch (...) {
          fail(0);
        }
      }
#pragma omp barrier
      if (update_began) {
        try {
          update_->run_group(me);
        } catch (...) {
          fail(me);
        }
      }
    }
  }
  // A failed group leaves the update's inputs borrowed until the next step takes new ones.
  if (first_failure.load() >= 0) std::rethrow_exception(errors[size_t(first_failure.load())]);
  if (update_began) return update_->end_groups()[0];
  collect_update_inputs();
  return update_->run(update_inputs)[0];
}

}  // namespace kiln::train
