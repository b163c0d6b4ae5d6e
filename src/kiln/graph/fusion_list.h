#pragma once
// The one list of graph-kernel fusions (Context::enable_graph_kernel, CompileOptions::fusion).
// A fusion is a pattern, `int passes::fuse_<name>(Graph&)` in passes/fuse_<name>.cpp, that
// replaces what it matches by nodes of its own types, each run by a kernel under kernels/.
// graph/fusions.cpp builds the fusion table from these lists and static_asserts that every
// fusion has its pass and makes at least one node type, and that every node type names a listed
// fusion and a kernel (a missing pass or kernel fails to compile or link). The pass pipeline
// runs the fusions in this order, the compile report counts their nodes under the names below,
// and CompileOptions::disabled_fusions turns one off by its name.
//
// Adding a fusion: its pass file, its kernel file, a row in each list below.
// clang-format off

// X(name, switch): `switch` is the CompileOptions flag that turns the fusion on besides
// `fusion` itself (a fusion with no flag of its own names `fusion`).
#define KILN_FOR_EACH_FUSION(X)                                                                \
  /* Before the epilogues: the sum of micro-batches' weight-gradient products would otherwise */ \
  /* become one product with the other as its residual add, and the velocity could take      */ \
  /* neither.                                                                                 */ \
  X(matmul_momentum,  fusion)                                                                  \
  X(bn_relu,          fusion)                                                                  \
  X(epilogues,        fusion)                                                                  \
  X(bn_relu_conv,     bn_relu_into_conv)                                                       \
  X(pooled_conv_grad, fusion)                                                                  \
  X(elementwise,      fusion)                                                                  \
  X(reductions,       fusion)

// X(node_type, fusion, counted_as, kernel): each node type a fusion makes (graph/ir.h's
// NodeType), the report's count it adds to (`uncounted`: none), and the function in
// graph/detail/fused_kernels.h that builds its kernel at bind time.
//
//  fused_update       matmul accumulated straight into momentum_update's velocity (`op`): inputs
//                     (p, a, v, b), writes v only; the parameter's step is a separate sgd_update
//  bn_relu            batch_norm + [residual add +] relu (forward)
//  bn_relu_grad       relu_grad + batch_norm_grad (backward)
//  bn_add_relu_grad   add + relu_grad + batch_norm_grad (backward, at a residual block's end)
//  epilogue           conv2d/matmul (`op`) with `post_ops` folded in
//  bn_stats           batch_norm's statistics alone: inputs (x, gamma, beta, running_mean,
//                     running_var), outputs (mean, inv_std); for bn_relu_conv's readers
//  bn_relu_conv       conv2d (`op`) reading relu(batch_norm(x)) on the fly: inputs (x, w, gamma,
//                     beta, mean, inv_std); or conv2d_backward_weights: (dy, x, gamma, beta,
//                     mean, inv_std)
//  pooled_conv_grad   max_pool2d_grad [+ relu_grad] + conv2d_backward_weights [+ _data] over the
//                     pool's sparse gradient: inputs (pooled grad, pool input, conv input, weight
//                     or kNoValue), outputs (dw, [db,] [dx]); attrs are the conv's (the pool
//                     window is always 2×2/2); the pool input may be replaced by conv_relu_pool's
//                     winners
//  conv_relu_pool     conv2d + relu + 2×2/2 max_pool2d forward: outputs (pooled, winners: u8, the
//                     pool's choices for pooled_conv_grad), the relu output never whole (one input
//                     channel: Kiln's kernel; more: oneDNN's in batch chunks); attrs are the
//                     conv's; pooled may be row-major as for max_pool_with_winners
//  max_pool_with_winners
//                     2×2/2 max_pool2d that also records its winners (u8) for
//                     pooled_conv_grad: outputs (pooled, winners); pooled may be row-major where a
//                     flattening reshape reads it
//  fused_elementwise  a chain of elementwise ops in one pass over memory (`chain`)
//  fused_reduction    elementwise chain feeding a sum/mean (`chain`, then `op`)
#define KILN_FOR_EACH_FUSED_NODE(X)                                                               \
  X(fused_update,          matmul_momentum,  matmul_momentum,  make_matmul_momentum_kernel)        \
  X(bn_relu,               bn_relu,          bn_relu,          make_bn_relu_kernel)                \
  X(bn_relu_grad,          bn_relu,          bn_relu,          make_bn_relu_kernel)                \
  X(bn_add_relu_grad,      bn_relu,          bn_relu,          make_bn_relu_kernel)                \
  X(epilogue,              epilogues,        epilogues,        make_epilogue_node_kernel)          \
  X(bn_stats,              bn_relu_conv,     uncounted,        make_bn_relu_conv_kernel)           \
  X(bn_relu_conv,          bn_relu_conv,     bn_relu_conv,     make_bn_relu_conv_kernel)           \
  X(pooled_conv_grad,      pooled_conv_grad, pooled_conv_grad, make_pooled_conv_grad_kernel)       \
  X(conv_relu_pool,        pooled_conv_grad, recording_pools,  make_conv_relu_pool_node_kernel)    \
  X(max_pool_with_winners, pooled_conv_grad, recording_pools,  make_max_pool_with_winners_kernel)  \
  X(fused_elementwise,     elementwise,      elementwise,      make_fused_elementwise_kernel)      \
  X(fused_reduction,       reductions,       reductions,       make_reduction_kernel)
// clang-format on
