#pragma once
// The eager (PyNative-style) autograd tape. Every op run with grad enabled on an input that
// requires grad leaves a GradNode on its outputs; backward walks those nodes newest first and
// applies each op's gradient rule from the op table, the same rule graph autodiff uses.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/op.h"

namespace kiln {

struct GradNode {
  struct Edge {
    std::shared_ptr<GradNode> node;  // the producer of this input, or null for a leaf
    int output_index = 0;
    std::shared_ptr<TensorImpl> leaf;  // a leaf that requires grad
  };
  ops::OpKind kind;
  ops::Attrs attrs;
  std::vector<Tensor> saved_inputs;  // detached; undefined unless the op saves them
  std::vector<ops::TensorMeta> input_metas;
  std::vector<Tensor> saved_outputs;
  std::vector<ops::TensorMeta> output_metas;
  std::vector<Edge> edges;  // one per input
  std::vector<bool> needs_grad;
  uint64_t sequence = 0;  // creation order: consumers always have larger numbers
  bool released = false;  // saved tensors freed by a backward without retain_graph
};

namespace autograd {

// Installs the tape into the dispatch chain (ops/dispatch_chain.h), so eager ops on tensors that
// require grad are recorded from then on. Idempotent and thread-safe; call it before the forward
// pass whose gradients you want (train::Model does).
void install_tape();
// Whether install_tape() has run in this process.
bool tape_installed();

// Accumulates d(root)/d(leaf) into every leaf's .grad(). root must be a scalar unless
// grad_output (same shape as root) is given.
void backward(const Tensor& root, const Tensor& grad_output = Tensor(), bool retain_graph = false);

// Returns d(root)/d(inputs) without touching .grad(). An input that root does not depend on gets
// a zero tensor.
std::vector<Tensor> grad(const Tensor& root, const std::vector<Tensor>& inputs,
                         const Tensor& grad_output = Tensor(), bool retain_graph = false);

// Called once per input of grad() as soon as its gradient is final (no later node of the walk
// adds to it), in the order the backward produces them; data parallelism starts reducing a
// bucket of gradients from it while the rest of the backward runs. Inputs that root does not
// depend on are reported last, with zeros.
using GradReadyFn = std::function<void(size_t input_index, const Tensor& grad)>;
std::vector<Tensor> grad(const Tensor& root, const std::vector<Tensor>& inputs,
                         const Tensor& grad_output, bool retain_graph,
                         const GradReadyFn& on_ready);

}  // namespace autograd

using ops::NoGradGuard;

}  // namespace kiln
