#pragma once
// Graph autodiff: differentiates the graph being traced by calling, on symbolic tensors, the
// same gradient rules (OpDef::grad) the eager tape calls on real ones. The rules are written
// with ops from functional.h, so calling them while the tracer is active appends the backward
// nodes to the same graph: one graph holds forward, loss and backward.
#include <vector>

#include "kiln/graph/tracer.h"

namespace kiln::graph {

// d(loss)/d(wrt) for every tensor in wrt (parameters bound as state, or traced values), as
// symbolic tensors of the trace. loss must be a scalar traced tensor. A tensor the loss does not
// depend on gets zeros, as autograd::grad gives. `seed` is the gradient the backward starts from
// (loss scaling seeds it with the scale, a state scalar so a new scale needs no recompile); it
// must have the loss's shape and dtype. Undefined: ones, as autograd::grad's default.
std::vector<Tensor> gradients(Tracer& tracer, const Tensor& loss, const std::vector<Tensor>& wrt,
                              const Tensor& seed = Tensor());

}  // namespace kiln::graph
