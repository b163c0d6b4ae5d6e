#pragma once
// One op's forward and backward on random data, timed through the kernels an eager step calls:
// what a cost model that measures instead of estimating reads (AMP's placement, AUTO_PARALLEL's
// search). Ops with a gradient rule run their backward too, for the inputs marked
// differentiable; an input the kernel writes in place is never differentiated.
//
//   autograd::OpTimingQuery q{.kind = ops::OpKind::matmul, .inputs = {a, b}};
//   std::optional<double> ms = autograd::time_op_ms(q, 3);
#include <optional>
#include <string>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln::autograd {

struct OpTimingQuery {
  ops::OpKind kind;
  std::vector<ops::TensorMeta> inputs;
  ops::Attrs attrs;
  uint32_t differentiable = ~0u;  // bit i: the backward computes input i's gradient
};

// Identifies a query (op, dtypes, shapes, attributes, differentiable inputs), for caches.
std::string timing_key(const OpTimingQuery& query);

// The fastest of `repeats` timed runs (one, when a run takes over 20 ms) after one untimed run,
// in milliseconds, on `threads` kernel threads: on one, the thread's CPU time (a shared machine's
// other processes do not count; AMP's placement compares kernels this way), on more, wall time. Floating inputs hold values in [-1, 1] from a private generator (the model's does not
// advance), integer ones zeros (a valid index or class for every op that reads one). nullopt when
// no kernel runs the op on these inputs here.
std::optional<double> time_op_ms(const OpTimingQuery& query, int repeats, int threads = 1);

}  // namespace kiln::autograd
