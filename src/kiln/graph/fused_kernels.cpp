#include "kiln/graph/fused_kernels.h"

#include "kiln/core/error.h"
#include "kiln/ops/kernels/conv_single_channel.h"

namespace kiln::graph {

std::shared_ptr<SpecialKernel> make_special_kernel(const Node& node, std::span<const Tensor> inputs,
                                                   std::span<const Tensor> outputs) {
  switch (node.type) {
    case NodeType::epilogue:
      if (node.op == ops::OpKind::max_pool2d_grad) {
        if (!can_run_max_pool_grad(node, inputs, outputs)) {
          throw Error(node_label(node) + ": operands " + describe(inputs[1]) +
                      " cannot run the fused pooling gradient");
        }
        return make_max_pool_grad_kernel(node, inputs, outputs);
      }
      if (can_run_single_channel_conv(node, inputs, outputs)) {
        return make_single_channel_conv_kernel(node, inputs, outputs);
      }
      return make_epilogue_kernel(node, inputs, outputs);
    case NodeType::bn_relu:
    case NodeType::bn_relu_grad:
    case NodeType::bn_add_relu_grad:
      return make_bn_relu_kernel(node, inputs, outputs);
    case NodeType::bn_stats:
    case NodeType::bn_relu_conv:
      return make_bn_relu_conv_kernel(node, inputs, outputs);
    case NodeType::fused_reduction:
      return make_reduction_kernel(node, inputs, outputs);
    case NodeType::fused_update:
      return make_matmul_momentum_kernel(node, inputs, outputs);
    case NodeType::reorder:
      return make_layout_reorder_kernel(node, inputs, outputs);
    case NodeType::pooled_conv_grad:
      return make_pooled_conv_grad_kernel(node, inputs, outputs);
    case NodeType::conv_relu_pool:
      if (inputs[0].dim(1) == 1 &&
          ops::can_run_single_channel_conv(inputs[0], inputs[1].shape(), node.attrs)) {
        return make_conv_relu_pool_kernel(node, inputs, outputs);
      }
      return make_chunked_conv_relu_pool_kernel(node, inputs, outputs);
    case NodeType::pool_winners:
      return make_pool_winners_kernel(node, inputs, outputs);
    case NodeType::relu_mask:
      return make_relu_mask_kernel(node, inputs, outputs);
    default:
      break;
  }
  throw Error("graph executor: no kernel for node " + node_label(node));
}

}  // namespace kiln::graph
