#pragma once
// The one list of Kiln's operators. Each entry X(name) must have exactly one definition
// `const OpDef op_def_name` somewhere under ops/; a missing one is a link error, and the table's
// size is checked by a static_assert in op_table.cpp. Tests walk the whole table (tests/ops).
//
// Backward-only kernels (conv2d_backward_data, …) are ops too, so graph mode can schedule,
// fuse and cost them like any other.
// clang-format off
// Elementwise, broadcasting: each has a tile function that the fusion engine chains
// (ops::is_elementwise() is this list).
#define KILN_FOR_EACH_ELEMENTWISE_OP(X)                                                      \
  X(add) X(sub) X(mul) X(div) X(maximum) X(minimum) X(pow)                                   \
  X(neg) X(exp) X(log) X(sqrt) X(rsqrt) X(abs) X(relu) X(gelu) X(sigmoid) X(tanh)            \
  X(square) X(add_scalar) X(mul_scalar) X(pow_scalar)                                        \
  X(relu_grad) X(gelu_grad) X(where_positive) X(compare_equal) X(sign)

#define KILN_FOR_EACH_OP(X)                                                                  \
  KILN_FOR_EACH_ELEMENTWISE_OP(X)                                                            \
  /* reductions and shape */                                                                 \
  X(sum) X(mean) X(max) X(argmax) X(sum_to_shape) X(broadcast_to)                                  \
  X(reshape) X(transpose) X(concat) X(slice) X(pad_slice_grad) X(cast) X(one_hot)             \
  X(contiguous)                                                                              \
  /* neural-network ops (oneDNN where it has them) */                                       \
  X(softmax) X(log_softmax) X(softmax_grad) X(log_softmax_grad) X(causal_mask)              \
  X(matmul)                                                                                  \
  X(conv2d) X(conv2d_backward_data) X(conv2d_backward_weights)                               \
  X(max_pool2d) X(max_pool2d_grad) X(avg_pool2d) X(avg_pool2d_grad)                          \
  X(batch_norm) X(batch_norm_grad) X(layer_norm) X(layer_norm_grad)                          \
  X(dropout) X(softmax_cross_entropy) X(softmax_cross_entropy_grad)                          \
  X(embedding) X(embedding_grad)                                                             \
  /* optimizer updates: in place, one fused pass over parameter, gradient and state */       \
  X(sgd_update) X(momentum_update) X(adam_update)                                            \
  /* collectives across ranks (kernels call comm/); data parallelism's gradient buckets */   \
  X(all_reduce) X(broadcast) X(all_gather) X(reduce_scatter) X(all_to_all) X(barrier)        \
  X(all_reduce_bucket_start) X(all_reduce_bucket_wait)
// clang-format on
