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

const OpDef op_def_sgd_update = {.name = "sgd_update", .infer = not_yet};
const OpDef op_def_momentum_update = {.name = "momentum_update", .infer = not_yet};
const OpDef op_def_adam_update = {.name = "adam_update", .infer = not_yet};
}  // namespace kiln::ops
