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

const OpDef op_def_softmax = {.name = "softmax", .infer = not_yet};
const OpDef op_def_log_softmax = {.name = "log_softmax", .infer = not_yet};
const OpDef op_def_softmax_grad = {.name = "softmax_grad", .infer = not_yet};
const OpDef op_def_log_softmax_grad = {.name = "log_softmax_grad", .infer = not_yet};
const OpDef op_def_matmul = {.name = "matmul", .infer = not_yet};
const OpDef op_def_conv2d = {.name = "conv2d", .infer = not_yet};
const OpDef op_def_conv2d_backward_data = {.name = "conv2d_backward_data", .infer = not_yet};
const OpDef op_def_conv2d_backward_weights = {.name = "conv2d_backward_weights", .infer = not_yet};
const OpDef op_def_max_pool2d = {.name = "max_pool2d", .infer = not_yet};
const OpDef op_def_max_pool2d_grad = {.name = "max_pool2d_grad", .infer = not_yet};
const OpDef op_def_avg_pool2d = {.name = "avg_pool2d", .infer = not_yet};
const OpDef op_def_avg_pool2d_grad = {.name = "avg_pool2d_grad", .infer = not_yet};
const OpDef op_def_batch_norm = {.name = "batch_norm", .infer = not_yet};
const OpDef op_def_batch_norm_grad = {.name = "batch_norm_grad", .infer = not_yet};
const OpDef op_def_layer_norm = {.name = "layer_norm", .infer = not_yet};
const OpDef op_def_layer_norm_grad = {.name = "layer_norm_grad", .infer = not_yet};
const OpDef op_def_dropout = {.name = "dropout", .infer = not_yet};
const OpDef op_def_softmax_cross_entropy = {.name = "softmax_cross_entropy", .infer = not_yet};
const OpDef op_def_softmax_cross_entropy_grad = {.name = "softmax_cross_entropy_grad", .infer = not_yet};
const OpDef op_def_embedding = {.name = "embedding", .infer = not_yet};
const OpDef op_def_embedding_grad = {.name = "embedding_grad", .infer = not_yet};
}  // namespace kiln::ops
