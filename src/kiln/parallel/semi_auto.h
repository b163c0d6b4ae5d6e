#pragma once
// SEMI_AUTO_PARALLEL in graph mode: the user's strategies on some ops (nn layers' `.shard(...)`,
// ops::ShardScope), the rest propagated, and each rank runs its part of every op.
//
//   kiln::set_auto_parallel_context({.parallel_mode = kiln::ParallelMode::SEMI_AUTO_PARALLEL,
//                                    .device_num = size});
//   fc1->matmul().shard({{1, 1}, {2, 1}});   // Megatron: columns of the first layer ...
//   fc2->matmul().shard({{1, 2}, {1, 2}});   // ... rows of the second, partial sums all-reduced
//
// Compiling a training step (train::CompiledTrainStep) then:
//  1. traces the network and loss once with whole shapes into a graph of its own (the logical
//     graph: what one process would run; every rank is fed the whole batch, MindSpore's
//     full_batch);
//  2. plans it (sharding_plan.h) and, the first time, keeps only this rank's block of each split
//     parameter and of its optimizer state, sliced from rank 0's whole initial values, so the
//     run computes what one process would;
//  3. replays the logical graph into the step's own trace as this rank's local graph: each op
//     on its local shapes, with the redistributions its inputs need in front of it
//     (redistribution.h), and the outputs made whole;
//  4. differentiates that local graph with graph autodiff (through the inserted collectives)
//     from a seed of 1/ranks, each rank's share of the one loss, and all-reduces each
//     parameter's gradient over the ranks that hold the same block of it.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/graph/tracer.h"
#include "kiln/nn/cell.h"
#include "kiln/parallel/auto_parallel.h"
#include "kiln/parallel/machine_model.h"
#include "kiln/parallel/sharding_plan.h"

namespace kiln::parallel {

// SEMI_AUTO_PARALLEL or AUTO_PARALLEL is set: ops split across the ranks as a plan says (both
// compile this way; AUTO_PARALLEL's plan comes from its search, auto_parallel.h).
bool semi_auto_active();
bool auto_parallel_active();
// The job's ranks for SEMI_AUTO_PARALLEL: device_num, which must equal the communicator's size
// when set (Error naming both otherwise).
int64_t semi_auto_ranks();

// The logical graph of one step and its plan.
struct LogicalStep {
  graph::Graph graph;
  ShardingPlan plan;
  graph::ValueId logits = graph::kNoValue, loss = graph::kNoValue;
  std::string plan_text;                    // ShardingPlan::str for this rank
  std::string auto_text;                    // AUTO_PARALLEL: AutoPlan::str (empty otherwise)
  std::optional<StepPrediction> predicted;  // AUTO_PARALLEL: the plan's step per rank
};

// Step 1 alone: the logical graph of `forward` (network and loss) on whole-shape inputs, with
// `params` bound as state, and no plan (kiln plan plans it for any number of devices).
std::unique_ptr<LogicalStep> trace_logical_step(
    const ops::TensorMeta& images, const ops::TensorMeta& labels,
    const std::function<std::pair<Tensor, Tensor>(const Tensor&, const Tensor&)>& forward,
    const std::vector<nn::NamedTensor>& params);

// Steps 1 and 2 above. `forward` traces the network and the loss on symbolic whole-batch inputs
// and returns {logits, loss}. `params` are the network's parameters and buffers (by name);
// `optimizer_state` the optimizer's (`<name>.<i>` belongs to optimizer parameter i, as in
// Optimizer::state_and_names), with `optimizer_params` the optimizer's parameter list. Under
// AUTO_PARALLEL the plan is searched with `machine`'s figures (the same on every rank).
std::unique_ptr<LogicalStep> plan_step(
    const ops::TensorMeta& images, const ops::TensorMeta& labels,
    const std::function<std::pair<Tensor, Tensor>(const Tensor&, const Tensor&)>& forward,
    const std::vector<nn::NamedTensor>& params, const std::vector<nn::NamedTensor>& optimizer_state,
    const std::vector<Tensor>& optimizer_params, const MachineModel& machine = {});

// Step 3: the logical step replayed on this rank into the active trace; returns {logits, loss},
// the loss whole on every rank, the logits too with `whole_logits` (else as their op left them).
std::pair<Tensor, Tensor> trace_local_step(graph::Tracer& tracer, const LogicalStep& step,
                                           const Tensor& images, const Tensor& labels,
                                           bool whole_logits);

// Step 4: the seed of the backward (1/ranks, shaped like the loss) and the gradients summed
// over the ranks that hold the same block of each parameter.
Tensor backward_seed(const Tensor& loss);
std::vector<Tensor> reduce_replicated_gradients(const std::vector<Tensor>& grads,
                                                const std::vector<Tensor>& params);

// The layout a parameter (or optimizer state tensor) was split into, or null when whole.
const TensorLayout* sharded_layout(const Tensor& t);
// The whole value of a parameter that may be split (all-gathered from the ranks; a copy of the
// tensor itself when whole). Every rank must call it, in the same order (checkpoints, tests).
Tensor gather_whole(const Tensor& t);
std::vector<nn::NamedTensor> gather_whole(const std::vector<nn::NamedTensor>& tensors);
// Forgets which tensors were split (tests that build several networks in one process).
void forget_sharded_parameters();

}  // namespace kiln::parallel
