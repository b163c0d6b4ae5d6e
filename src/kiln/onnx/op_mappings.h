#pragma once
// The one table of ONNX mappings: for every op of ops/op_list.h, in its order, either the
// function that emits the op as ONNX nodes or the reason no mapping exists. A row missing, or
// out of order, fails the build (static_asserts in op_mappings.cpp); tests/onnx walks the rows
// and exports every zoo model, so a model whose trace holds an op without a mapping fails a test.
#include <span>
#include <string_view>

#include "kiln/ops/op.h"

namespace kiln::onnx {

class NodeEmitter;  // onnx/detail/node_emitter.h: what an emit function writes through
using EmitFn = void (*)(NodeEmitter&);

struct OpMapping {
  ops::OpKind op;
  EmitFn emit = nullptr;      // null only with no_mapping_reason
  std::string_view onnx_ops;  // the ONNX op types emit writes, for docs and tests
  const char* no_mapping_reason = nullptr;
};

const OpMapping& op_mapping(ops::OpKind kind);
std::span<const OpMapping> op_mappings();

}  // namespace kiln::onnx
