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

TensorMeta meta_of(const Tensor& t) {
  bool cl = t.rank() == 4 && !t.is_contiguous() && t.is_channels_last();
  return {t.shape(), t.dtype(), cl ? Layout::channels_last : Layout::contiguous};
}

size_t hash_attrs(const Attrs& a) {
  size_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (int64_t v : a.axes) mix(uint64_t(v));
  mix(0xa5);
  for (int64_t v : a.shape) mix(uint64_t(v));
  for (int i = 0; i < 2; ++i) {
    mix(uint64_t(a.kernel[i]));
    mix(uint64_t(a.stride[i]));
    mix(uint64_t(a.padding[i]));
    mix(uint64_t(a.dilation[i]));
  }
  for (int64_t v : {a.groups, a.start, a.end, a.step, a.num_classes, a.reduction, a.seed}) {
    mix(uint64_t(v));
  }
  mix(uint64_t(a.keepdims) | uint64_t(a.training) << 1 | uint64_t(a.transpose_a) << 2 |
      uint64_t(a.transpose_b) << 3 | uint64_t(a.nesterov) << 4 | uint64_t(a.dtype) << 8 |
      uint64_t(a.nchw16c) << 16);
  for (double d : {a.scalar, a.momentum, a.weight_decay, a.beta1, a.beta2, a.eps}) {
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    mix(bits);
  }
  return h;
}

}  // namespace kiln::ops
