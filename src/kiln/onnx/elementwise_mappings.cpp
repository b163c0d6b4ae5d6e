// Elementwise ops that ONNX writes as a few nodes. Constants take the input's dtype: ONNX's
// binary ops need both operands of one type.
#include <cmath>

#include "kiln/onnx/detail/emitters.h"

namespace kiln::onnx {

void emit_rsqrt(NodeEmitter& e) {
  const std::string root = e.temp();
  e.add("Sqrt", {e.input(0)}, {root});
  e.add("Reciprocal", {root}, {e.output(0)});
}

// The exact form Kiln computes: x * Φ(x) = 0.5 * x * (1 + erf(x / √2)). (ONNX's Gelu op is
// opset 20.)
void emit_gelu(NodeEmitter& e) {
  const DType dtype = e.input_meta(0).dtype;
  const std::string x = e.input(0), scaled = e.temp(), erf = e.temp(), shifted = e.temp(),
                    product = e.temp();
  e.add("Mul", {x, e.scalar(1.0 / std::sqrt(2.0), dtype)}, {scaled});
  e.add("Erf", {scaled}, {erf});
  e.add("Add", {erf, e.scalar(1.0, dtype)}, {shifted});
  e.add("Mul", {x, shifted}, {product});
  e.add("Mul", {product, e.scalar(0.5, dtype)}, {e.output(0)});
}

void emit_square(NodeEmitter& e) {
  const std::string x = e.input(0);
  e.add("Mul", {x, x}, {e.output(0)});
}

namespace {

void with_scalar(NodeEmitter& e, std::string_view op_type) {
  const double s = e.attrs<ops::ScalarAttrs>().scalar;
  e.add(op_type, {e.input(0), e.scalar(s, e.input_meta(0).dtype)}, {e.output(0)});
}

}  // namespace

void emit_add_scalar(NodeEmitter& e) {
  with_scalar(e, "Add");
}
void emit_mul_scalar(NodeEmitter& e) {
  with_scalar(e, "Mul");
}
void emit_pow_scalar(NodeEmitter& e) {
  with_scalar(e, "Pow");
}

// Kiln gives 1 or 0 in the operands' dtype; ONNX's Equal gives bool.
void emit_compare_equal(NodeEmitter& e) {
  const std::string equal = e.temp();
  e.add("Equal", {e.input(0), e.input(1)}, {equal});
  e.add("Cast", {equal}, {e.output(0)}).i("to", onnx_element_type(e.output_meta(0).dtype));
}

void emit_where_positive(NodeEmitter& e) {
  const std::string positive = e.temp();
  e.add("Greater", {e.input(0), e.scalar(0.0, e.input_meta(0).dtype)}, {positive});
  e.add("Where", {positive, e.input(1), e.input(2)}, {e.output(0)});
}

}  // namespace kiln::onnx
