// TEMPORARY during development: placeholders for ops not yet written. Each entry is removed
// when its real definition lands; this file is deleted when empty.
#include "kiln/core/error.h"
#include "kiln/ops/op.h"

namespace kiln::ops {
namespace {
std::vector<TensorMeta> not_yet(std::span<const TensorMeta>, const Attrs&) {
  throw Error("op not implemented yet");
}
}  // namespace

const OpDef op_def_neg = {.name = "neg", .infer = not_yet};
const OpDef op_def_exp = {.name = "exp", .infer = not_yet};
const OpDef op_def_log = {.name = "log", .infer = not_yet};
const OpDef op_def_sqrt = {.name = "sqrt", .infer = not_yet};
const OpDef op_def_rsqrt = {.name = "rsqrt", .infer = not_yet};
const OpDef op_def_abs = {.name = "abs", .infer = not_yet};
const OpDef op_def_relu = {.name = "relu", .infer = not_yet};
const OpDef op_def_gelu = {.name = "gelu", .infer = not_yet};
const OpDef op_def_sigmoid = {.name = "sigmoid", .infer = not_yet};
const OpDef op_def_tanh = {.name = "tanh", .infer = not_yet};
const OpDef op_def_square = {.name = "square", .infer = not_yet};
const OpDef op_def_add_scalar = {.name = "add_scalar", .infer = not_yet};
const OpDef op_def_mul_scalar = {.name = "mul_scalar", .infer = not_yet};
const OpDef op_def_pow_scalar = {.name = "pow_scalar", .infer = not_yet};
const OpDef op_def_relu_grad = {.name = "relu_grad", .infer = not_yet};
const OpDef op_def_gelu_grad = {.name = "gelu_grad", .infer = not_yet};
const OpDef op_def_where_positive = {.name = "where_positive", .infer = not_yet};
const OpDef op_def_compare_equal = {.name = "compare_equal", .infer = not_yet};
const OpDef op_def_sign = {.name = "sign", .infer = not_yet};
const OpDef op_def_sum = {.name = "sum", .infer = not_yet};
const OpDef op_def_mean = {.name = "mean", .infer = not_yet};
const OpDef op_def_max = {.name = "max", .infer = not_yet};
const OpDef op_def_argmax = {.name = "argmax", .infer = not_yet};
const OpDef op_def_sum_to = {.name = "sum_to", .infer = not_yet};
const OpDef op_def_broadcast_to = {.name = "broadcast_to", .infer = not_yet};
const OpDef op_def_reshape = {.name = "reshape", .infer = not_yet};
const OpDef op_def_transpose = {.name = "transpose", .infer = not_yet};
const OpDef op_def_concat = {.name = "concat", .infer = not_yet};
const OpDef op_def_slice = {.name = "slice", .infer = not_yet};
const OpDef op_def_pad_slice_grad = {.name = "pad_slice_grad", .infer = not_yet};
const OpDef op_def_cast = {.name = "cast", .infer = not_yet};
const OpDef op_def_one_hot = {.name = "one_hot", .infer = not_yet};
const OpDef op_def_contiguous = {.name = "contiguous", .infer = not_yet};
}  // namespace kiln::ops
