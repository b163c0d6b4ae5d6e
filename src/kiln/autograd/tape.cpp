#include "kiln/autograd/tape.h"

#include <atomic>
#include <queue>
#include <string>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::autograd {
namespace {

std::atomic<uint64_t> g_sequence{0};

void record(ops::OpKind kind, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
            const ops::Attrs& attrs) {
  const ops::OpDef& def = ops::op_def(kind);
  auto node = std::make_shared<GradNode>();
  node->kind = kind;
  node->attrs = attrs;
  node->sequence = g_sequence.fetch_add(1);
  node->saved_inputs.resize(inputs.size());
  node->edges.resize(inputs.size());
  node->needs_grad.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    node->input_metas.push_back(ops::meta_of(t));
    if (i < 32 && (def.saved_inputs >> i & 1u)) node->saved_inputs[i] = t.detach();
    if (!t.requires_grad()) continue;
    node->needs_grad[i] = true;
    AutogradMeta& meta = t.autograd_meta();
    if (meta.grad_fn) {
      node->edges[i] = {meta.grad_fn, meta.output_index, nullptr};
    } else {
      node->edges[i] = {nullptr, 0, t.impl_ptr()};
    }
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    node->output_metas.push_back(ops::meta_of(outputs[j]));
    if (def.saves_outputs) node->saved_outputs.push_back(outputs[j].detach());
    if (!is_floating(outputs[j].dtype())) continue;
    AutogradMeta& meta = outputs[j].autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_index = int(j);
  }
}

// Counts, for each input of grad(), the edges of root's graph that end at it (each delivers one
// gradient during the walk). The root itself, when it is an input, counts once.
void count_leaf_edges(const Tensor& root, const std::unordered_map<TensorImpl*, size_t>& index,
                      std::vector<int64_t>& counts) {
  if (!root.requires_grad()) return;
  const AutogradMeta& root_meta = root.autograd_meta();
  if (!root_meta.grad_fn) {
    auto it = index.find(root.impl());
    if (it != index.end()) ++counts[it->second];
    return;
  }
  std::unordered_map<const GradNode*, bool> seen;
  std::vector<const GradNode*> stack{root_meta.grad_fn.get()};
  seen.emplace(root_meta.grad_fn.get(), true);
  while (!stack.empty()) {
    const GradNode* node = stack.back();
    stack.pop_back();
    for (size_t i = 0; i < node->edges.size(); ++i) {
      if (!node->needs_grad[i]) continue;
      const GradNode::Edge& e = node->edges[i];
      if (e.node) {
        if (seen.emplace(e.node.get(), true).second) stack.push_back(e.node.get());
      } else if (e.leaf) {
        auto it = index.find(e.leaf.get());
        if (it != index.end()) ++counts[it->second];
      }
    }
  }
}

Tensor accumulate(const Tensor& existing, const Tensor& g) {
  return existing.defined() ? ops::add(existing, g) : g;
}

struct NodeOrder {
  bool operator()(const GradNode* a, const GradNode* b) const { return a->sequence < b->sequence; }
};

// Walks the graph behind `root`; calls on_leaf(leaf_impl, grad) for every gradient reaching a leaf.
template <class OnLeaf>
void run_backward(const Tensor& root, const Tensor& grad_output, bool retain_graph,
                  OnLeaf on_leaf) {
  if (!root.requires_grad()) {
    if (!tape_installed()) {
      throw Error("backward: the tensor " + describe(root) +
                  " does not require grad, and the autograd tape is not installed: call "
                  "autograd::install_tape() before the forward pass");
    }
    throw Error("backward: the tensor " + describe(root) +
                " does not require grad (no parameter took part in computing it)");
  }
  Tensor seed = grad_output;
  if (!seed.defined()) {
    if (root.numel() != 1) {
      throw Error("backward: root " + describe(root) +
                  " is not a scalar; pass a grad_output of the same shape");
    }
    seed = Tensor::full(root.shape(), 1.0, root.dtype());
  }
  ops::NoGradGuard no_grad;
  AutogradMeta& root_meta = root.autograd_meta();
  if (!root_meta.grad_fn) {
    on_leaf(root.impl_ptr(), seed);
    return;
  }
  std::unordered_map<GradNode*, std::vector<Tensor>> pending;
  std::unordered_map<GradNode*, std::shared_ptr<GradNode>> alive;
  std::priority_queue<GradNode*, std::vector<GradNode*>, NodeOrder> queue;
  auto enqueue = [&](const std::shared_ptr<GradNode>& node, int index, const Tensor& g) {
    auto [it, inserted] = pending.try_emplace(node.get());
    if (inserted) {
      it->second.resize(node->output_metas.size());
      alive.emplace(node.get(), node);
      queue.push(node.get());
    }
    it->second[size_t(index)] = accumulate(it->second[size_t(index)], g);
  };
  enqueue(root_meta.grad_fn, root_meta.output_index, seed);

  while (!queue.empty()) {
    GradNode* node = queue.top();
    queue.pop();
    std::vector<Tensor> grad_outputs = std::move(pending[node]);
    pending.erase(node);
    const ops::OpDef& def = ops::op_def(node->kind);
    if (node->released) {
      throw Error(std::string("backward: the graph through '") + std::string(def.name) +
                  "' was already used by a backward pass and its saved tensors freed; pass "
                  "retain_graph = true to the first backward to run it twice");
    }
    std::vector<bool> needs = node->needs_grad;
    std::unique_ptr<bool[]> needs_array(new bool[needs.size()]);
    for (size_t i = 0; i < needs.size(); ++i) needs_array[i] = needs[i];
    // A rule may assume every grad_output is defined: fill missing ones with zeros.
    for (size_t j = 0; j < grad_outputs.size(); ++j) {
      if (!grad_outputs[j].defined()) {
        grad_outputs[j] = Tensor::zeros(node->output_metas[j].shape, node->output_metas[j].dtype);
      }
    }
    ops::GradCtx ctx{node->saved_inputs,  node->input_metas,
                     node->saved_outputs, grad_outputs,
                     node->attrs,         std::span<const bool>(needs_array.get(), needs.size())};
    std::vector<Tensor> grads = def.grad(ctx);
    if (grads.size() != node->edges.size()) {
      throw Error(std::string(def.name) + ": gradient rule returned " +
                  std::to_string(grads.size()) + " gradients for " +
                  std::to_string(node->edges.size()) + " inputs");
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!node->needs_grad[i] || !grads[i].defined()) continue;
      const GradNode::Edge& e = node->edges[i];
      if (grads[i].shape() != node->input_metas[i].shape) {
        throw Error(std::string(def.name) + ": gradient for input " + std::to_string(i) +
                    " has shape " + grads[i].shape().str() + ", expected " +
                    node->input_metas[i].shape.str());
      }
      if (e.node) {
        enqueue(e.node, e.output_index, grads[i]);
      } else if (e.leaf) {
        on_leaf(e.leaf, grads[i]);
      }
    }
    if (!retain_graph) {
      node->saved_inputs.clear();
      node->saved_outputs.clear();
      node->released = true;
    }
    alive.erase(node);
  }
}

}  // namespace

void install_tape() {
  ops::dispatch_chain().set_tape(record);
}

bool tape_installed() {
  return ops::dispatch_chain().tape() == record;
}

void backward(const Tensor& root, const Tensor& grad_output, bool retain_graph) {
  run_backward(root, grad_output, retain_graph,
               [](const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
                 Tensor t(leaf);
                 t.set_grad(accumulate(t.grad(), g));
               });
}

std::vector<Tensor> grad(const Tensor& root, const std::vector<Tensor>& inputs,
                         const Tensor& grad_output, bool retain_graph) {
  return grad(root, inputs, grad_output, retain_graph, GradReadyFn());
}

std::vector<Tensor> grad(const Tensor& root, const std::vector<Tensor>& inputs,
                         const Tensor& grad_output, bool retain_graph,
                         const GradReadyFn& on_ready) {
  std::unordered_map<TensorImpl*, size_t> index;
  for (size_t i = 0; i < inputs.size(); ++i) index.emplace(inputs[i].impl(), i);
  // How many edges of the graph behind root still have to deliver a gradient to each input.
  std::vector<int64_t> pending_edges(inputs.size(), 0);
  if (on_ready) count_leaf_edges(root, index, pending_edges);
  std::vector<Tensor> grads(inputs.size());
  std::vector<bool> reported(inputs.size(), false);
  run_backward(root, grad_output, retain_graph,
               [&](const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
                 auto it = index.find(leaf.get());
                 if (it == index.end()) return;
                 const size_t i = it->second;
                 grads[i] = accumulate(grads[i], g);
                 if (on_ready && --pending_edges[i] <= 0 && !reported[i]) {
                   reported[i] = true;
                   on_ready(i, grads[i]);
                 }
               });
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!grads[i].defined()) grads[i] = Tensor::zeros(inputs[i].shape(), inputs[i].dtype());
    if (on_ready && !reported[i]) on_ready(i, grads[i]);
  }
  return grads;
}

}  // namespace kiln::autograd
