#include <string>

#include "kiln/core/error.h"
#include "kiln/ops/op.h"

namespace kiln::ops {
namespace {

// Every op in KILN_FOR_EACH_OP must be defined; a missing `op_def_name` fails to link.
#define KILN_OP_ADDRESS(name) &op_def_##name,
constexpr const OpDef* kOpTable[] = {KILN_FOR_EACH_OP(KILN_OP_ADDRESS)};
#undef KILN_OP_ADDRESS
static_assert(std::size(kOpTable) == kNumOps, "op table and OpKind disagree");

}  // namespace

const OpDef& op_def(OpKind kind) {
  return *kOpTable[size_t(kind)];
}

std::string_view op_name(OpKind kind) {
  return kOpTable[size_t(kind)]->name;
}

OpKind op_by_name(std::string_view name) {
  for (size_t i = 0; i < kNumOps; ++i) {
    if (kOpTable[i]->name == name) return OpKind(i);
  }
  throw Error("unknown op '" + std::string(name) + "'");
}

std::string describe_meta(const TensorMeta& m) {
  return std::string(dtype_name(m.dtype)) + m.shape.str();
}

std::string describe_metas(std::span<const TensorMeta> metas) {
  std::string s;
  for (size_t i = 0; i < metas.size(); ++i) s += (i ? ", " : "") + describe_meta(metas[i]);
  return s;
}

TensorMeta meta_of(const Tensor& t) {
  bool cl = t.rank() == 4 && !t.is_contiguous() && t.is_channels_last();
  return {t.shape(), t.dtype(), cl ? Layout::channels_last : Layout::contiguous};
}

}  // namespace kiln::ops
