#pragma once
// Kernels of the fused nodes that are not plain elementwise chains: conv2d/matmul with oneDNN
// post-ops, BatchNorm+[add+]ReLU forward and backward, elementwise-into-reduction, and the
// layout pass's reorders. Each is built once, at bind time, for its bound tensors (primitives
// created, workspace sized), then only run.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "kiln/graph/ir.h"

namespace kiln::graph {

class SpecialKernel {
 public:
  virtual ~SpecialKernel() = default;
  virtual void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) = 0;
  // Scratch the kernel needs only while it runs (staging buffers, oneDNN's scratchpad,
  // per-thread partial sums): the executor places it in the arena, where no tensor is live at
  // this kernel's position, and hands it over with set_workspace() before the first run. Its
  // contents are undefined when a run starts.
  virtual size_t workspace_bytes() const { return 0; }
  virtual void set_workspace(std::byte* data) { (void)data; }
  // A graph input is read where the caller keeps each step's batch, so its memory moves between
  // steps (the tensors bound to it follow). Kernels that keep raw addresses of bound tensors
  // re-read them in inputs_moved(); a kernel that does not say it follows keeps its inputs
  // copied into the arena.
  virtual bool follows_moved_inputs() const { return false; }
  virtual void inputs_moved() {}
};

// Lays a kernel's scratch arrays out one after another in its workspace, each 64-byte aligned.
// A kernel walks the same layout twice: with no base, to learn its workspace_bytes(), and over
// the workspace it is given, in set_workspace().
class WorkspaceCarver {
 public:
  explicit WorkspaceCarver(std::byte* base = nullptr) : base_(base) {}
  template <class T>
  T* take(int64_t count) {
    T* at = base_ != nullptr ? reinterpret_cast<T*>(base_ + bytes_) : nullptr;
    bytes_ += (size_t(std::max<int64_t>(count, 0)) * sizeof(T) + 63) / 64 * 64;
    return at;
  }
  size_t bytes() const { return bytes_; }

 private:
  std::byte* base_;
  size_t bytes_ = 0;
};

// Builds the kernel for `node` (a fused node type: the kernel graph/fusion_list.h names for it;
// or reorder, relu_mask) over the tensors it will be run with.
std::shared_ptr<SpecialKernel> make_special_kernel(const Node& node, std::span<const Tensor> inputs,
                                                   std::span<const Tensor> outputs);

// Whether a conv2d/matmul node (plain or with post-ops) can run as a primitive built once for
// these bound tensors (dense weights, rank-2 matmul operands with a unit stride).
bool can_precompile(const Node& node, std::span<const Tensor> inputs,
                    std::span<const Tensor> outputs);

// A reduction as one pass over dense memory: out[o, j] = sum_r in[o, r, j] in the input's
// memory order, with the output row-major.
struct ReductionGeometry {
  int64_t outer = 1, reduced = 1, inner = 1;
};
// The dims of `in` that sum/mean (ReduceAttrs::axes; empty: all) or sum_to_shape
// (ShapeAttrs::shape) reduce.
std::vector<bool> reduction_mask(ops::OpKind op, const ops::Attrs& attrs,
                                 const ops::TensorMeta& in);
// Whether reducing `in` over `mask` has that form; fills g when it does.
bool reduction_geometry(const ops::TensorMeta& in, const std::vector<bool>& mask,
                        ReductionGeometry& g);

// max_pool2d_grad with non-overlapping windows, one pass (see kernels/max_pool_grad.cpp).
bool can_run_max_pool_grad(const Node& node, std::span<const Tensor> inputs,
                           std::span<const Tensor> outputs);
std::shared_ptr<SpecialKernel> make_max_pool_grad_kernel(const Node& node,
                                                         std::span<const Tensor> inputs,
                                                         std::span<const Tensor> outputs);

// conv2d with one input channel, plain or + relu, on the op's hand-written kernel (see
// kernels/single_channel_conv.cpp).
bool can_run_single_channel_conv(const Node& node, std::span<const Tensor> inputs,
                                 std::span<const Tensor> outputs);
std::shared_ptr<SpecialKernel> make_single_channel_conv_kernel(const Node& node,
                                                               std::span<const Tensor> inputs,
                                                               std::span<const Tensor> outputs);
// conv_relu_pool nodes with one input channel, on the same kernel with the 2×2/2 max pool done
// per thread on the rows it has just computed (ops::single_channel_conv_relu_pool_forward).
std::shared_ptr<SpecialKernel> make_conv_relu_pool_kernel(const Node& node,
                                                          std::span<const Tensor> inputs,
                                                          std::span<const Tensor> outputs);

// max_pool2d_grad [+ relu_grad] + conv2d_backward_weights [+ _data] over the pool's sparse
// gradient, one pass per image (see kernels/pooled_conv_grad.cpp). `pooled_conv_grad_fits` is
// the shape rule the fusion pass and the kernel share: a convolution of input `x` and weight `w`
// shapes with `conv` attrs (stride 1) whose output a 2×2/2 max pool reads, with C, O <= 16 and a
// 3- or 5-tap kernel height (false in a build without AVX-512).
bool pooled_conv_grad_fits(const Shape& x, const Shape& w, const ops::ConvAttrs& conv, bool has_dx);
bool can_run_pooled_conv_grad(const Node& node, std::span<const Tensor> inputs,
                              std::span<const Tensor> outputs);
std::shared_ptr<SpecialKernel> make_pooled_conv_grad_kernel(const Node& node,
                                                            std::span<const Tensor> inputs,
                                                            std::span<const Tensor> outputs);
// relu_mask nodes: a relu output squeezed to the bytes its gradient reads (kernels/relu_mask.cpp).
std::shared_ptr<SpecialKernel> make_relu_mask_kernel(const Node& node,
                                                     std::span<const Tensor> inputs,
                                                     std::span<const Tensor> outputs);
// The 2×2/2 max pool of n channels-last f32 images [h, w, c] that records each window's winner
// (u8, channels-last) for pooled_conv_grad; pooled is written channels-last or row-major (NCHW).
// Threads split the images (kernels/max_pool_with_winners.cpp; AVX-512 builds only).
void pool_2x2_with_winners(const float* x, int64_t n, int64_t c, int64_t h, int64_t w,
                           float* pooled, bool pooled_row_major, uint8_t* winners);
// How many images a conv_relu_pool node on oneDNN's convolution runs at a time, its output of
// `out_bytes_per_image` each going through the workspace (and the pool) while in cache; 0 when
// chunks do not pay (the whole output is small already, or a chunk would be too few images
// for the convolution to run at full speed).
int64_t conv_pool_chunk(int64_t batch, int64_t out_bytes_per_image);
// conv_relu_pool with more than one input channel: oneDNN's convolution + relu, chunk by chunk,
// each chunk pooled (kernels/epilogue.cpp).
std::shared_ptr<SpecialKernel> make_chunked_conv_relu_pool_kernel(const Node& node,
                                                                  std::span<const Tensor> inputs,
                                                                  std::span<const Tensor> outputs);
// max_pool_with_winners nodes: the max pool that records the winners
// (kernels/max_pool_with_winners.cpp).
std::shared_ptr<SpecialKernel> make_max_pool_with_winners_kernel(const Node& node,
                                                                 std::span<const Tensor> inputs,
                                                                 std::span<const Tensor> outputs);

// Elementwise nodes with per-(sample, channel) or scalar operands, and mean/sum over H, W, that
// read blocked nChw16c activations (see kernels/blocked_spatial.cpp): whether this node, bound
// to these tensors, needs that kernel, and the kernel.
bool runs_blocked_spatial(const Node& node, std::span<const Tensor> inputs,
                          std::span<const Tensor> outputs);
// Whether an elementwise operand of shape `operand` holds one value per (sample, channel) of a
// rank-4 output of shape `out` (or one value): [1|N, 1|C, 1, 1] once right-aligned. The layout
// pass lets such operands meet a blocked output; the kernel above repeats them.
bool is_per_sample_channel(const Shape& operand, const Shape& out);
std::shared_ptr<SpecialKernel> make_blocked_spatial_kernel(const Node& node,
                                                           std::span<const Tensor> inputs,
                                                           std::span<const Tensor> outputs);

// Per-type factories (one file each).
// fused_update: inputs param, a, velocity, b (kernels/epilogue.cpp).
std::shared_ptr<SpecialKernel> make_matmul_momentum_kernel(const Node& node,
                                                           std::span<const Tensor> inputs,
                                                           std::span<const Tensor> outputs);
// conv2d/matmul with post-ops (or plain) on a oneDNN primitive built once (kernels/epilogue.cpp).
std::shared_ptr<SpecialKernel> make_epilogue_kernel(const Node& node,
                                                    std::span<const Tensor> inputs,
                                                    std::span<const Tensor> outputs);
// epilogue nodes: max_pool2d_grad + relu_grad on the pooling kernel, a one-input-channel conv on
// its own kernel, the rest on make_epilogue_kernel (fused_kernels.cpp).
std::shared_ptr<SpecialKernel> make_epilogue_node_kernel(const Node& node,
                                                         std::span<const Tensor> inputs,
                                                         std::span<const Tensor> outputs);
// conv_relu_pool nodes: make_conv_relu_pool_kernel for one input channel where that kernel
// runs, else make_chunked_conv_relu_pool_kernel (fused_kernels.cpp).
std::shared_ptr<SpecialKernel> make_conv_relu_pool_node_kernel(const Node& node,
                                                               std::span<const Tensor> inputs,
                                                               std::span<const Tensor> outputs);
// fused_elementwise nodes: the chain on the pointwise engine (fused_elementwise.cpp).
std::shared_ptr<SpecialKernel> make_fused_elementwise_kernel(const Node& node,
                                                             std::span<const Tensor> inputs,
                                                             std::span<const Tensor> outputs);
std::shared_ptr<SpecialKernel> make_bn_relu_kernel(const Node& node, std::span<const Tensor> inputs,
                                                   std::span<const Tensor> outputs);
// bn_stats and bn_relu_conv (kernels/bn_relu_conv.cpp).
std::shared_ptr<SpecialKernel> make_bn_relu_conv_kernel(const Node& node,
                                                        std::span<const Tensor> inputs,
                                                        std::span<const Tensor> outputs);
std::shared_ptr<SpecialKernel> make_reduction_kernel(const Node& node,
                                                     std::span<const Tensor> inputs,
                                                     std::span<const Tensor> outputs);
// reorder: channels-last <-> nChw16c (kernels/layout_reorder.cpp).
std::shared_ptr<SpecialKernel> make_layout_reorder_kernel(const Node& node,
                                                          std::span<const Tensor> inputs,
                                                          std::span<const Tensor> outputs);

}  // namespace kiln::graph
