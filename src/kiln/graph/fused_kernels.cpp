#include "kiln/graph/detail/fused_kernels.h"

#include "kiln/core/error.h"
#include "kiln/graph/fusions.h"
#include "kiln/ops/kernels/conv_single_channel.h"

namespace kiln::graph {

std::shared_ptr<SpecialKernel> make_special_kernel(const Node& node, std::span<const Tensor> inputs,
                                                   std::span<const Tensor> outputs) {
  if (const FusedNodeDef* fused = fused_node_def(node.type)) {
    return fused->kernel(node, inputs, outputs);
  }
  switch (node.type) {
    case NodeType::reorder:
      return make_layout_reorder_kernel(node, inputs, outputs);
    case NodeType::relu_mask:
      return make_relu_mask_kernel(node, inputs, outputs);
    default:
      break;
  }
  throw Error("graph executor: no kernel for node " + node_label(node));
}

std::shared_ptr<SpecialKernel> make_epilogue_node_kernel(const Node& node,
                                                         std::span<const Tensor> inputs,
                                                         std::span<const Tensor> outputs) {
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
}

std::shared_ptr<SpecialKernel> make_conv_relu_pool_node_kernel(const Node& node,
                                                               std::span<const Tensor> inputs,
                                                               std::span<const Tensor> outputs) {
  if (inputs[0].dim(1) == 1 && ops::can_run_single_channel_conv(inputs[0], inputs[1].shape(),
                                                                node.attrs.as<ops::ConvAttrs>())) {
    return make_conv_relu_pool_kernel(node, inputs, outputs);
  }
  return make_chunked_conv_relu_pool_kernel(node, inputs, outputs);
}

}  // namespace kiln::graph
