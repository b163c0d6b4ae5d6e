#pragma once
// What one operator declares: everything every feature needs to know about it.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/attrs.h"
#include "kiln/ops/op_list.h"

namespace kiln::ops {

enum class OpKind : uint16_t {
#define KILN_OP_ENUM(name) name,
  KILN_FOR_EACH_OP(KILN_OP_ENUM)
#undef KILN_OP_ENUM
};
#define KILN_OP_COUNT(name) +1
inline constexpr size_t kNumOps = 0 KILN_FOR_EACH_OP(KILN_OP_COUNT);
#undef KILN_OP_COUNT

// Whether `kind` is in op_list.h's elementwise list (KILN_FOR_EACH_ELEMENTWISE_OP).
constexpr bool is_elementwise(OpKind kind) {
  switch (kind) {
#define KILN_OP_ELEMENTWISE_CASE(name) case OpKind::name:
    KILN_FOR_EACH_ELEMENTWISE_OP(KILN_OP_ELEMENTWISE_CASE)
#undef KILN_OP_ELEMENTWISE_CASE
    return true;
    default:
      return false;
  }
}

enum class Layout : uint8_t { contiguous, channels_last };

// Shape, dtype and memory order of an op's input or output, known before any data is.
struct TensorMeta {
  Shape shape;
  DType dtype = DType::f32;
  Layout layout = Layout::contiguous;
  bool operator==(const TensorMeta&) const = default;
};
TensorMeta meta_of(const Tensor& t);
// "f32[2, 3]", for messages.
std::string describe_meta(const TensorMeta& m);
// "f32[2, 3], f32[3]", for messages.
std::string describe_metas(std::span<const TensorMeta> metas);

enum class AmpClass : uint8_t {
  low_precision,  // runs in bf16/f16 from O1 on (matmul, conv): the white list
  fp32,           // always computed in fp32 (softmax, losses, norms' statistics): the black list
  follow,         // computes in whatever its inputs are (elementwise, shape ops)
};

struct Cost {
  double flops = 0;
  double bytes = 0;
};

// What a gradient rule sees. Inputs/outputs not named in the op's `saved_inputs`/`saves_outputs`
// are undefined here (their metas are always available).
struct GradCtx {
  std::span<const Tensor> inputs;
  std::span<const TensorMeta> input_metas;
  std::span<const Tensor> outputs;
  std::span<const Tensor> grad_outputs;  // undefined where an output received no gradient
  const Attrs& attrs;
  // Which inputs need a gradient; a rule may skip work for the others.
  std::span<const bool> needs_grad;
};

using InferFn = std::vector<TensorMeta> (*)(std::span<const TensorMeta> inputs, const Attrs&);
using KernelFn = void (*)(std::span<const Tensor> inputs, std::span<Tensor> outputs, const Attrs&);
using ViewFn = Tensor (*)(const Tensor& input, const Attrs&);
using GradFn = std::vector<Tensor> (*)(const GradCtx&);
using CostFn = Cost (*)(std::span<const TensorMeta> inputs, std::span<const TensorMeta> outputs,
                        const Attrs&);
// f32 computation over a tile of n contiguous elements; the fusion engine chains these so a
// chain of elementwise ops makes one pass over memory.
using TileFn = void (*)(float* out, const float* const* inputs, int64_t n, const Attrs&);

// How the op splits across devices (ops/shard_rule.h); null with no_shard_reason: the op always
// runs replicated under SEMI_AUTO_PARALLEL, and the plan says why.
struct ShardRule;

inline constexpr uint32_t kAllInputs = 0xffffffffu;

struct OpDef {
  std::string_view name;
  // The attribute family the op reads (attrs.h); ops::call and the graph reject any other.
  AttrsKind attrs = AttrsKind::NoAttrs;
  int num_inputs = 1;  // -1: any number
  // How many of the last inputs a call may leave out (num_inputs counts them): an optimizer
  // update's bf16 copy of the parameter, written only by compiled mixed-precision steps.
  int optional_inputs = 0;
  int num_outputs = 1;
  InferFn infer = nullptr;
  KernelFn kernel = nullptr;  // exactly one of kernel and view
  ViewFn view = nullptr;      // output aliases input 0 (reshape, transpose, slice)
  GradFn grad = nullptr;      // null only with no_grad_reason
  const char* no_grad_reason = nullptr;
  uint32_t saved_inputs = 0;  // bit i: the gradient rule reads input i
  bool saves_outputs = false;
  uint32_t mutated_inputs = 0;  // bit i: the kernel writes input i in place
  AmpClass amp = AmpClass::follow;
  // Whether the kernels take f16 data. fp16 has no fast path on this CPU (no AVX512-FP16) and
  // oneDNN has no f16 kernels for it, so ops without them get f16 inputs widened to f32 by `cast`
  // ops around the call (the dispatcher inserts them, visible to autograd and tracing alike) and
  // their outputs rounded back to f16.
  bool f16_kernels = true;
  CostFn cost = nullptr;
  TileFn tile = nullptr;             // elementwise ops only
  const ShardRule* shard = nullptr;  // null only with no_shard_reason
  const char* no_shard_reason = nullptr;
};

const OpDef& op_def(OpKind kind);
std::string_view op_name(OpKind kind);
// Looks an op up by name; throws Error naming the unknown op.
OpKind op_by_name(std::string_view name);

#define KILN_OP_DECLARE(name) extern const OpDef op_def_##name;
KILN_FOR_EACH_OP(KILN_OP_DECLARE)
#undef KILN_OP_DECLARE

}  // namespace kiln::ops
