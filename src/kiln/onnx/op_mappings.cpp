#include "kiln/onnx/op_mappings.h"

#include <algorithm>
#include <iterator>

#include "kiln/onnx/detail/emitters.h"

namespace kiln::onnx {
namespace {

using ops::OpKind;

// A string literal as a template argument: emit_as<"Relu">.
template <size_t N>
struct OnnxOpType {
  char text[N];
  constexpr OnnxOpType(const char (&s)[N]) { std::copy_n(s, N, text); }  // NOLINT
  constexpr std::string_view view() const { return {text, N - 1}; }
};

// The op is one ONNX node of that type, with the same inputs in the same order and output 0.
template <OnnxOpType Type>
void emit_as(NodeEmitter& e) {
  std::vector<std::string> inputs;
  for (int i = 0; i < e.num_inputs(); ++i) inputs.push_back(e.input(i));
  e.add(Type.view(), inputs, {e.output(0)});
}

template <OnnxOpType Type>
constexpr OpMapping same_as(OpKind op) {
  return {op, emit_as<Type>, Type.view()};
}

constexpr OpMapping none(OpKind op, const char* reason) {
  return {op, nullptr, {}, reason};
}

constexpr const char kGradient[] =
    "it computes a gradient, and an exported network is traced for inference alone";
constexpr const char kOptimizer[] =
    "it is an optimizer update, part of a training step, never of the traced network";
constexpr const char kCollective[] =
    "it is a collective across ranks; the exported network is traced in one process, where the "
    "whole network runs without one";

// Every op of ops/op_list.h, in its order.
constexpr OpMapping kMappings[] = {
    // elementwise
    same_as<"Add">(OpKind::add),
    same_as<"Sub">(OpKind::sub),
    same_as<"Mul">(OpKind::mul),
    same_as<"Div">(OpKind::div),
    same_as<"Max">(OpKind::maximum),
    same_as<"Min">(OpKind::minimum),
    same_as<"Pow">(OpKind::pow),
    same_as<"Neg">(OpKind::neg),
    same_as<"Exp">(OpKind::exp),
    same_as<"Log">(OpKind::log),
    same_as<"Sqrt">(OpKind::sqrt),
    {OpKind::rsqrt, emit_rsqrt, "Sqrt, Reciprocal"},
    same_as<"Abs">(OpKind::abs),
    same_as<"Relu">(OpKind::relu),
    {OpKind::gelu, emit_gelu, "Mul, Erf, Add"},
    same_as<"Sigmoid">(OpKind::sigmoid),
    same_as<"Tanh">(OpKind::tanh),
    {OpKind::square, emit_square, "Mul"},
    {OpKind::add_scalar, emit_add_scalar, "Add"},
    {OpKind::mul_scalar, emit_mul_scalar, "Mul"},
    {OpKind::pow_scalar, emit_pow_scalar, "Pow"},
    none(OpKind::relu_grad, kGradient),
    none(OpKind::gelu_grad, kGradient),
    {OpKind::where_positive, emit_where_positive, "Greater, Where"},
    {OpKind::compare_equal, emit_compare_equal, "Equal, Cast"},
    same_as<"Sign">(OpKind::sign),
    // reductions and shape
    {OpKind::sum, emit_sum, "ReduceSum"},
    {OpKind::mean, emit_mean, "ReduceMean"},
    {OpKind::max, emit_max, "ReduceMax"},
    {OpKind::argmax, emit_argmax, "ArgMax"},
    {OpKind::sum_to_shape, emit_sum_to_shape, "ReduceSum, Reshape"},
    {OpKind::broadcast_to, emit_broadcast_to, "Expand"},
    {OpKind::reshape, emit_reshape, "Reshape"},
    {OpKind::transpose, emit_transpose, "Transpose"},
    {OpKind::concat, emit_concat, "Concat"},
    {OpKind::slice, emit_slice, "Slice"},
    none(OpKind::pad_slice_grad, kGradient),
    {OpKind::cast, emit_cast, "Cast"},
    {OpKind::one_hot, emit_one_hot, "Cast, OneHot"},
    same_as<"Identity">(OpKind::contiguous),
    // neural-network ops
    {OpKind::softmax, emit_softmax, "Softmax"},
    {OpKind::log_softmax, emit_log_softmax, "LogSoftmax"},
    none(OpKind::softmax_grad, kGradient),
    none(OpKind::log_softmax_grad, kGradient),
    {OpKind::causal_mask, emit_causal_mask, "Where"},
    {OpKind::matmul, emit_matmul, "Transpose, MatMul"},
    {OpKind::conv2d, emit_conv2d, "Conv"},
    none(OpKind::conv2d_backward_data, kGradient),
    none(OpKind::conv2d_backward_weights, kGradient),
    {OpKind::max_pool2d, emit_max_pool2d, "MaxPool"},
    none(OpKind::max_pool2d_grad, kGradient),
    {OpKind::avg_pool2d, emit_avg_pool2d, "AveragePool"},
    none(OpKind::avg_pool2d_grad, kGradient),
    {OpKind::batch_norm, emit_batch_norm, "BatchNormalization"},
    none(OpKind::batch_norm_grad, kGradient),
    {OpKind::layer_norm, emit_layer_norm, "LayerNormalization"},
    none(OpKind::layer_norm_grad, kGradient),
    {OpKind::dropout, emit_dropout, "Identity"},
    none(OpKind::softmax_cross_entropy,
         "it is a loss; the export holds the network up to its logits, without the loss"),
    none(OpKind::softmax_cross_entropy_grad, kGradient),
    {OpKind::embedding, emit_embedding, "Gather"},
    none(OpKind::embedding_grad, kGradient),
    // optimizer updates
    none(OpKind::sgd_update, kOptimizer),
    none(OpKind::momentum_update, kOptimizer),
    none(OpKind::adam_update, kOptimizer),
    // collectives
    none(OpKind::all_reduce, kCollective),
    none(OpKind::broadcast, kCollective),
    none(OpKind::all_gather, kCollective),
    none(OpKind::reduce_scatter, kCollective),
    none(OpKind::all_to_all, kCollective),
    none(OpKind::barrier, kCollective),
    none(OpKind::all_reduce_bucket_start, kCollective),
    none(OpKind::all_reduce_bucket_wait, kCollective),
};

static_assert(std::size(kMappings) == ops::kNumOps,
              "every op of ops/op_list.h needs a row: its ONNX mapping, or why it has none");

constexpr bool rows_complete_and_in_op_order() {
  for (size_t i = 0; i < std::size(kMappings); ++i) {
    const OpMapping& m = kMappings[i];
    if (m.op != OpKind(i)) return false;
    // The ONNX op types it writes, or why it has none: never both, never neither. (That emit is
    // set exactly where the op types are is the unit test's to check: under -fsanitize=undefined
    // GCC cannot compare a function's address with null in a constant expression.)
    if (m.onnx_ops.empty() == (m.no_mapping_reason == nullptr)) return false;
  }
  return true;
}
static_assert(rows_complete_and_in_op_order(),
              "rows must follow ops/op_list.h's order, each with an emit function and its ONNX "
              "op types, or a reason");

}  // namespace

const OpMapping& op_mapping(ops::OpKind kind) {
  return kMappings[size_t(kind)];
}

std::span<const OpMapping> op_mappings() {
  return kMappings;
}

}  // namespace kiln::onnx
