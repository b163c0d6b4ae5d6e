#pragma once
// Where low precision pays. MindSpore's O1/O2 put every white-listed (and, at O2, every
// following) op in bf16; on a CPU without AMX a bf16 kernel can be slower than Kiln's fp32 one
// (LeNet's 1-6-16-channel convolutions, pools between them), and each dtype change costs a cast
// forward and another backward. So, unless AmpConfig::strict, autocast asks a CostModel for each
// op it would run in low precision what the op costs in each dtype, adds the casts each choice
// causes, and keeps fp32 where low precision does not win by a margin.
//
// The choice is made per op, in trace order, from the dtypes its inputs already have (greedy: a
// chain of bf16 ops pays each cast once, at its start). Graph mode decides while tracing, so the
// compiled graph holds only the casts its choices need; eager mode decides on every call, each
// shape measured once.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/ops/attrs.h"
#include "kiln/ops/op.h"

namespace kiln::amp {

// One op call's cost question: the op, its inputs' metas in the dtype asked about, its
// attributes.
struct OpQuery {
  ops::OpKind kind;
  std::span<const ops::TensorMeta> inputs;
  const ops::Attrs& attrs;
};

// What an op or a cast costs on this CPU, in milliseconds of one training step (forward and,
// where the op has a gradient rule, its backward). Tests feed fixed numbers; the measured model
// (amp/measured_cost.h) times the kernels.
class CostModel {
 public:
  virtual ~CostModel() = default;
  // The op run with every floating input in `query.inputs`' dtype; nullopt when unknown (the
  // op then keeps the placement AmpConfig::strict would give it).
  virtual std::optional<double> op_ms(const OpQuery& query) = 0;
  // One cast of `numel` elements from `from` to `to`.
  virtual double cast_ms(int64_t numel, DType from, DType to) = 0;
};

// One placement choice, for the compile log: "matmul f32[512, 784] x f32[784, 1024]: bf16
// (0.80 ms with casts vs 1.40 ms in f32)".
struct PlacementDecision {
  ops::OpKind kind;
  std::string inputs;  // the inputs as the op received them, "f32[64, 1, 28, 28], f32[6, 1, 5, 5]"
  DType chosen;
  double low_ms;  // low precision, casts included
  double f32_ms;  // fp32, casts included
  std::string str() const;
};

// One line per distinct decision, in first-seen order, with how many ops it covers: "conv2d
// bf16[128, 16, 32, 32], f32[16, 16, 3, 3]: bf16 (1.2 ms with casts vs 2.0 ms in f32) x6".
std::vector<std::string> describe_decisions(std::span<const PlacementDecision> decisions);

// Low precision must be at least this much cheaper than fp32 to be chosen: measured times on a
// shared machine wander by a few percent, and a tie should keep fp32's numerics.
inline constexpr double kLowPrecisionMargin = 0.9;
// ... and save at least this much per step: below it an op's time is what a compiled graph's
// fusions make of it (an fp32 matmul's weight gradient is fused with its momentum update, a bf16
// one is cast first), which the op's own kernels do not show. LeNet's fully connected layers
// measure 0.08 ms in bf16 against 0.11 ms in fp32 and are slower in bf16 in its compiled step.
inline constexpr double kMinLowPrecisionSavingMs = 0.05;

// The dtype `kind` runs in when autocast would run it in `low`: `low` when its cost (casts of the
// inputs `cast_count` first floating inputs included) is below kLowPrecisionMargin times fp32's
// and kMinLowPrecisionSavingMs below it, else f32. The decision is appended to `log` when given.
// nullopt when the model does not know the op's cost.
std::optional<DType> choose_dtype(CostModel& model, ops::OpKind kind,
                                  std::span<const ops::TensorMeta> inputs, const ops::Attrs& attrs,
                                  size_t cast_count, DType low,
                                  std::vector<PlacementDecision>* log);

// The process's measured model (created on first use, its timings cached for the process).
std::shared_ptr<CostModel> measured_cost_model();

}  // namespace kiln::amp
