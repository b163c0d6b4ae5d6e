#pragma once
// The emit functions of op_mappings.cpp's table, one per op that needs more than one ONNX node of
// the same name (ops that do are emit_as<"Type"> in the table itself).
#include "kiln/onnx/detail/node_emitter.h"

namespace kiln::onnx {

// Elementwise (elementwise_mappings.cpp).
void emit_rsqrt(NodeEmitter& e);
void emit_gelu(NodeEmitter& e);
void emit_square(NodeEmitter& e);
void emit_add_scalar(NodeEmitter& e);
void emit_mul_scalar(NodeEmitter& e);
void emit_pow_scalar(NodeEmitter& e);
void emit_compare_equal(NodeEmitter& e);
void emit_where_positive(NodeEmitter& e);

// Reductions and shape (shape_mappings.cpp).
void emit_sum(NodeEmitter& e);
void emit_mean(NodeEmitter& e);
void emit_max(NodeEmitter& e);
void emit_argmax(NodeEmitter& e);
void emit_sum_to_shape(NodeEmitter& e);
void emit_broadcast_to(NodeEmitter& e);
void emit_reshape(NodeEmitter& e);
void emit_transpose(NodeEmitter& e);
void emit_concat(NodeEmitter& e);
void emit_slice(NodeEmitter& e);
void emit_cast(NodeEmitter& e);
void emit_one_hot(NodeEmitter& e);

// Neural-network ops (nn_mappings.cpp).
void emit_softmax(NodeEmitter& e);
void emit_log_softmax(NodeEmitter& e);
void emit_causal_mask(NodeEmitter& e);
void emit_matmul(NodeEmitter& e);
void emit_conv2d(NodeEmitter& e);
void emit_max_pool2d(NodeEmitter& e);
void emit_avg_pool2d(NodeEmitter& e);
void emit_batch_norm(NodeEmitter& e);
void emit_layer_norm(NodeEmitter& e);
void emit_dropout(NodeEmitter& e);
void emit_embedding(NodeEmitter& e);

}  // namespace kiln::onnx
