// conv2d / matmul with oneDNN post-ops (bias, relu, residual add) for the graph executor.
// Everything oneDNN needs is built once, at bind time, for the bound tensors: primitive,
// memory objects, argument maps. A step only reorders the weights (they change every step) and
// executes. The blocked weights, any staged input and oneDNN's scratchpad live only while the
// kernel runs: they are its workspace, which the executor places in the arena.
#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/ops/dnnl/blocked_copy.h"
#include "kiln/ops/dnnl/context.h"
#include "kiln/ops/kernel_name.h"
#include "kiln/ops/kernels/conv_winograd.h"
#include "kiln/ops/optimizer/common.h"

namespace kiln::graph {
namespace {
using namespace ops::dnnl_util;

dnnl::primitive_attr post_op_attr(const Node& node, const Tensor* residual) {
  dnnl::primitive_attr attr = scratchpad_attr();
  dnnl::post_ops po;
  for (PostOp p : node.post_ops) {
    switch (p) {
      case PostOp::relu:
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        break;
      case PostOp::add_residual:
        po.append_binary(dnnl::algorithm::binary_add, desc_of(*residual, "fused epilogue"));
        break;
      case PostOp::relu_grad:
        throw Error(node_label(node) + ": relu_grad is not a oneDNN post-op");
    }
  }
  attr.set_post_ops(po);
  return attr;
}

// A training convolution's forward with the node's stride, dilation and padding.
dnnl::convolution_forward::desc conv_forward_desc(const dnnl::memory::desc& src,
                                                  const dnnl::memory::desc& weights,
                                                  const dnnl::memory::desc* bias,
                                                  const dnnl::memory::desc& dst,
                                                  const ops::ConvAttrs& a) {
  const dims strides{a.stride[0], a.stride[1]}, dil{a.dilation[0] - 1, a.dilation[1] - 1},
      pad{a.padding[0], a.padding[1]};
  const auto prop = dnnl::prop_kind::forward_training;
  const auto alg = dnnl::algorithm::convolution_direct;
  return bias ? dnnl::convolution_forward::desc(prop, alg, src, weights, *bias, dst, strides, dil,
                                                pad, pad)
              : dnnl::convolution_forward::desc(prop, alg, src, weights, dst, strides, dil, pad,
                                                pad);
}

int residual_post_op_index(const Node& node) {
  for (size_t i = 0; i < node.post_ops.size(); ++i) {
    if (node.post_ops[i] == PostOp::add_residual) return int(i);
  }
  return -1;
}

class DnnlEpilogue : public SpecialKernel {
 public:
  void run(std::span<const Tensor>, std::span<Tensor>) override {
    dnnl::stream& s = stream();
    if (has_src_reorder_) src_reorder_.execute(s, src_reorder_args_);
    stage_weights(s);
    ops::note_kernel(kernel_name_);
    prim_.execute(s, args_);
  }

  bool follows_moved_inputs() const override { return true; }
  void inputs_moved() override {
    for (auto& [memory, tensor] : bound_) memory.set_data_handle(tensor.raw_data());
  }

  size_t workspace_bytes() const override {
    WorkspaceCarver measure;
    carve(measure);
    return measure.bytes();
  }
  void set_workspace(std::byte* data) override {
    WorkspaceCarver carver(data);
    carve(carver);
  }

 protected:
  dnnl::memory bind(int arg, const dnnl::memory::desc& md, const Tensor& t) {
    dnnl::memory m = over(md, t);
    args_[arg] = m;
    return m;
  }
  // Memory over a bound tensor's data, kept up to date by inputs_moved().
  dnnl::memory over(const dnnl::memory::desc& md, const Tensor& t) {
    dnnl::memory m(md, engine(), t.raw_data());
    bound_.emplace_back(m, t);
    return m;
  }
  // Also names the kernel after the primitive every subclass binds its scratch for.
  void bind_scratch(const dnnl::primitive_desc_base& pd) {
    kernel_name_ = kernel_name_of(pd);
    dnnl::memory::desc sp = pd.scratchpad_desc();
    scratch_bytes_ = sp.get_size();
    if (scratch_bytes_ > 0) {
      scratch_ = dnnl::memory(sp, engine(), DNNL_MEMORY_NONE);
      args_[DNNL_ARG_SCRATCHPAD] = scratch_;
    }
  }
  // Weights arrive in the user's plain layout; the primitive wants its own (blocked) one.
  void bind_weights(const dnnl::memory::desc& user, const dnnl::memory::desc& wanted,
                    const Tensor& w) {
    if (user == wanted) {
      bind(DNNL_ARG_WEIGHTS, user, w);
      return;
    }
    weights_staged_ = true;
    staged_weights_ = dnnl::memory(wanted, engine(), DNNL_MEMORY_NONE);
    args_[DNNL_ARG_WEIGHTS] = staged_weights_;
    weights_ = w;
    weight_copy_ = BlockedCopy::between(user, wanted);
    if (weight_copy_) return;
    dnnl::memory from = over(user, w);
    reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), wanted));
    reorder_args_ = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, staged_weights_}};
  }
  void stage_weights(dnnl::stream& s) {
    if (weight_copy_) {
      weight_copy_->to_blocked(weights_.raw_data(), staged_weights_.get_data_handle());
    } else if (weights_staged_) {
      reorder_.execute(s, reorder_args_);
    }
  }
  void bind_residual(const Node& node, const Tensor* residual) {
    int idx = residual_post_op_index(node);
    if (idx < 0) return;
    bind(DNNL_ARG_ATTR_MULTIPLE_POST_OP(idx) | DNNL_ARG_SRC_1, desc_of(*residual, "fused epilogue"),
         *residual);
  }

  // oneDNN's fast convolutions read channels-last activations; anything else is converted into
  // the workspace first (a C=1 row-major tensor already is channels-last in memory).
  dnnl::memory::desc bind_channels_last_src(const Tensor& x) {
    Strides cl = channels_last_strides(x.shape());
    if (x.is_channels_last() || (x.shape()[1] == 1 && x.is_contiguous())) {
      auto md = desc_of(x.shape(), cl, x.dtype(), "conv2d");
      bind(DNNL_ARG_SRC, md, x);
      return md;
    }
    auto user = desc_of(x, "conv2d");
    auto md = desc_of(x.shape(), cl, x.dtype(), "conv2d");
    dnnl::memory from = over(user, x);
    staged_src_ = dnnl::memory(md, engine(), DNNL_MEMORY_NONE);
    src_reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), md));
    src_reorder_args_ = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, staged_src_}};
    has_src_reorder_ = true;
    args_[DNNL_ARG_SRC] = staged_src_;
    return md;
  }

  dnnl::primitive prim_;
  const char* kernel_name_ = "";  // noted on each run (ops/kernel_name.h)
  std::unordered_map<int, dnnl::memory> args_;
  std::vector<std::pair<dnnl::memory, Tensor>> bound_;
  bool has_src_reorder_ = false;
  dnnl::primitive src_reorder_;
  std::unordered_map<int, dnnl::memory> src_reorder_args_;
  dnnl::memory staged_src_;
  dnnl::memory scratch_;
  size_t scratch_bytes_ = 0;
  bool weights_staged_ = false;
  dnnl::primitive reorder_;
  std::unordered_map<int, dnnl::memory> reorder_args_;
  dnnl::memory staged_weights_;
  Tensor weights_;
  std::optional<BlockedCopy> weight_copy_;  // else reorder_ (a conversion between dtypes)
  // A result that passes through the workspace on its way to the outputs (ChunkedConvReluPool).
  bool has_staged_dst_ = false;
  dnnl::memory staged_dst_;

 private:
  // The workspace: oneDNN's scratchpad, the staged input, the blocked weights, the staged result.
  void carve(WorkspaceCarver& c) const {
    auto take = [&](const dnnl::memory& m, size_t bytes) {
      std::byte* at = c.take<std::byte>(int64_t(bytes));
      if (at != nullptr) m.set_data_handle(at);
    };
    if (scratch_bytes_ > 0) take(scratch_, scratch_bytes_);
    if (has_src_reorder_) take(staged_src_, staged_src_.get_desc().get_size());
    if (weights_staged_) take(staged_weights_, staged_weights_.get_desc().get_size());
    if (has_staged_dst_) take(staged_dst_, staged_dst_.get_desc().get_size());
  }
};

class ConvEpilogue : public DnnlEpilogue {
 public:
  ConvEpilogue(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out) {
    const Tensor& x = in[0];
    const Tensor& w = in[1];
    const Tensor* bias = in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
    const Tensor* residual = in.size() > 3 && in[3].defined() ? &in[3] : nullptr;
    const Tensor& y = out[0];
    if (!w.is_contiguous()) throw Error("fused conv2d: weights must be row-major OIHW");
    const ops::ConvAttrs& a = node.attrs.as<ops::ConvAttrs>();
    const int64_t g = a.groups;
    const Shape& ws = w.shape();
    dt type = data_type(x.dtype(), "conv2d");
    dnnl::memory::desc user_w =
        g == 1 ? dnnl::memory::desc(to_dims(ws), type, tag::oihw)
               : dnnl::memory::desc({g, ws[0] / g, ws[1], ws[2], ws[3]}, type, tag::goihw);
    dnnl::memory::desc any_w =
        g == 1 ? dnnl::memory::desc(to_dims(ws), type, tag::any)
               : dnnl::memory::desc({g, ws[0] / g, ws[1], ws[2], ws[3]}, type, tag::any);
    auto src = bind_channels_last_src(x), dst = desc_of(y, "conv2d");
    dnnl::memory::desc bmd;
    if (bias) bmd = desc_of(*bias, "conv2d");
    auto desc = conv_forward_desc(src, any_w, bias ? &bmd : nullptr, dst, a);
    auto pd = ops::dnnl_util::conv_forward_pd(desc, post_op_attr(node, residual), src, any_w);
    prim_ = dnnl::convolution_forward(pd);
    bind(DNNL_ARG_DST, dst, y);
    if (bias) bind(DNNL_ARG_BIAS, bmd, *bias);
    bind_weights(user_w, pd.weights_desc(), w);
    bind_residual(node, residual);
    bind_scratch(pd);
  }
};

// conv2d + relu + 2×2/2 max pool with winners (NodeType::conv_relu_pool) for more than one input
// channel: oneDNN's convolution runs on `chunk` images at a time into the workspace, and each
// chunk is pooled from there while it is still in cache. The relu output is never whole: LeNet's
// second layer (batch 64) held 400 KiB of it at its step's peak; a chunk of 32 images is 200 KiB
// of workspace. oneDNN runs 32 images as fast as 64 (130 µs per 64 either way here; chunks of 8
// took 140-150).
class ChunkedConvReluPool : public DnnlEpilogue {
 public:
  ChunkedConvReluPool(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : x_(in[0]), pooled_(out[0]), winners_(out[1]) {
    const Tensor& w = in[1];
    const Tensor* bias = in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
    const ops::ConvAttrs& a = node.attrs.as<ops::ConvAttrs>();
    const Shape& xs = x_.shape();
    const Shape conv_out{1, w.dim(0), xs[2] + 2 * a.padding[0] - (w.dim(2) - 1) * a.dilation[0],
                         xs[3] + 2 * a.padding[1] - (w.dim(3) - 1) * a.dilation[1]};
    chunk_ = conv_pool_chunk(xs[0], conv_out.numel() * int64_t(sizeof(float)));
    const Shape pooled{xs[0], conv_out[1], conv_out[2] / 2, conv_out[3] / 2};
    if (chunk_ == 0 || xs[0] % chunk_ != 0 || x_.dtype() != DType::f32 || !x_.is_channels_last() ||
        a.groups != 1 || !w.is_contiguous() || a.stride != std::array<int64_t, 2>{1, 1} ||
        pooled_.shape() != pooled || pooled_.dtype() != DType::f32 ||
        !(pooled_.is_channels_last() || pooled_.is_contiguous()) || winners_.shape() != pooled ||
        winners_.dtype() != DType::u8 || !winners_.is_channels_last()) {
      throw Error(node_label(node) + ": operands " + describe(x_) + ", " + describe(w) + " -> " +
                  describe(pooled_) + " cannot run as a chunked convolution + pool");
    }
    Shape src_shape = xs, dst_shape = conv_out;
    src_shape[0] = dst_shape[0] = chunk_;
    const dt type = data_type(x_.dtype(), "conv2d");
    auto src = desc_of(src_shape, x_.strides(), x_.dtype(), "conv2d");
    auto dst = desc_of(dst_shape, channels_last_strides(dst_shape), x_.dtype(), "conv2d");
    dnnl::memory::desc user_w(to_dims(w.shape()), type, tag::oihw),
        any_w(to_dims(w.shape()), type, tag::any), bmd;
    if (bias) bmd = desc_of(*bias, "conv2d");
    auto desc = conv_forward_desc(src, any_w, bias ? &bmd : nullptr, dst, a);
    dnnl::primitive_attr attr = scratchpad_attr();
    dnnl::post_ops relu;
    relu.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(relu);
    auto pd = ops::dnnl_util::conv_forward_pd(desc, attr, src, any_w);
    prim_ = dnnl::convolution_forward(pd);
    // run() points the source at each chunk; the result lives in the workspace.
    src_ = dnnl::memory(src, engine(), DNNL_MEMORY_NONE);
    args_[DNNL_ARG_SRC] = src_;
    staged_dst_ = dnnl::memory(dst, engine(), DNNL_MEMORY_NONE);
    has_staged_dst_ = true;
    args_[DNNL_ARG_DST] = staged_dst_;
    if (bias) bind(DNNL_ARG_BIAS, bmd, *bias);
    bind_weights(user_w, pd.weights_desc(), w);
    bind_scratch(pd);
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    dnnl::stream& s = stream();
    stage_weights(s);
    const dims conv_out = staged_dst_.get_desc().dims();
    const int64_t per_image = pooled_.numel() / pooled_.dim(0);
    const auto* y = static_cast<const float*>(staged_dst_.get_data_handle());
    const bool row_major = !pooled_.is_channels_last();
    for (int64_t n0 = 0; n0 < x_.dim(0); n0 += chunk_) {
      src_.set_data_handle(const_cast<float*>(x_.data<float>() + n0 * x_.strides()[0]));
      ops::note_kernel(kernel_name_);
      prim_.execute(s, args_);
      pool_2x2_with_winners(y, chunk_, conv_out[1], conv_out[2], conv_out[3],
                            pooled_.data<float>() + n0 * per_image, row_major,
                            winners_.data<uint8_t>() + n0 * per_image);
    }
  }

 private:
  Tensor x_, pooled_, winners_;
  int64_t chunk_ = 0;
  dnnl::memory src_;
};

// The [batch.., rows, cols] view oneDNN sees of a matmul operand, transposed through strides.
dnnl::memory::desc operand_desc(const Tensor& t, bool transposed) {
  Shape s = t.shape();
  Strides st = t.strides();
  int r = s.rank();
  if (transposed) {
    std::swap(s[r - 1], s[r - 2]);
    std::swap(st[size_t(r - 1)], st[size_t(r - 2)]);
  }
  // Size-1 dims get canonical strides (some implementations reject odd ones).
  int64_t acc = 1;
  for (int i = r - 1; i >= 0; --i) {
    if (s[i] == 1) st[size_t(i)] = acc;
    acc = std::max(acc, st[size_t(i)] * s[i]);
  }
  return desc_of(s, st, t.dtype(), "matmul");
}

class MatmulEpilogue : public DnnlEpilogue {
 public:
  MatmulEpilogue(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out) {
    const Tensor& a = in[0];
    const Tensor& b = in[1];
    const Tensor* bias = in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
    const Tensor* residual = in.size() > 3 && in[3].defined() ? &in[3] : nullptr;
    const Tensor& y = out[0];
    if (a.rank() != 2 || b.rank() != 2 || y.rank() != 2) {
      throw Error("fused matmul: only rank-2 operands are fused");
    }
    auto src = operand_desc(a, node.attrs.as<ops::MatmulAttrs>().transpose_a);
    auto wei = operand_desc(b, node.attrs.as<ops::MatmulAttrs>().transpose_b);
    auto dst = desc_of(y, "matmul");
    dnnl::memory::desc bmd;
    if (bias) {
      bmd = dnnl::memory::desc({1, y.shape()[1]}, data_type(bias->dtype(), "matmul"), tag::ab);
    }
    auto desc = bias ? dnnl::matmul::desc(src, wei, bmd, dst) : dnnl::matmul::desc(src, wei, dst);
    dnnl::matmul::primitive_desc pd(desc, post_op_attr(node, residual), engine());
    prim_ = dnnl::matmul(pd);
    bind(DNNL_ARG_SRC, src, a);
    bind(DNNL_ARG_WEIGHTS, wei, b);
    bind(DNNL_ARG_DST, dst, y);
    if (bias) bind(DNNL_ARG_BIAS, bmd, *bias);
    bind_residual(node, residual);
    bind_scratch(pd);
  }
};

// oneDNN's fast matmul kernels need a unit stride in one of the two matrix dims.
bool matrix_ok(const Tensor& t) {
  int r = t.rank();
  return r == 2 &&
         (t.strides()[1] == 1 || t.strides()[0] == 1 || t.shape()[0] == 1 || t.shape()[1] == 1);
}

// fused[matmul,momentum_update]: v = μ·v + a·b + wd·p, the product landing in the velocity
// through the sum post-op. The parameter's step, p -= lr·v, is a separate sgd_update
// (passes/fuse_matmul_momentum.cpp).
class MatmulVelocity : public DnnlEpilogue {
 public:
  MatmulVelocity(const Node& node, std::span<const Tensor> in)
      : param_(in[kFusedUpdateParam]),
        velocity_(in[kFusedUpdateVelocity]),
        weight_decay_(float(node.attrs.as<ops::MatmulMomentumAttrs>().weight_decay)) {
    const auto& attrs = node.attrs.as<ops::MatmulMomentumAttrs>();
    const Tensor &a = in[kFusedUpdateA], &b = in[kFusedUpdateB];
    if (!matrix_ok(a) || !matrix_ok(b) || !param_.is_contiguous() || !velocity_.is_contiguous() ||
        velocity_.shape() != param_.shape()) {
      throw Error(node_label(node) + ": operands " + describe(a) + ", " + describe(b) +
                  " and state " + describe(velocity_) + " cannot run as one fused update");
    }
    auto src = operand_desc(a, attrs.transpose_a);
    auto wei = operand_desc(b, attrs.transpose_b);
    auto dst = desc_of(velocity_, "matmul");
    dnnl::primitive_attr attr = scratchpad_attr();
    dnnl::post_ops po;
    po.append_sum(float(attrs.momentum));
    attr.set_post_ops(po);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), attr, engine());
    prim_ = dnnl::matmul(pd);
    bind(DNNL_ARG_SRC, src, a);
    bind(DNNL_ARG_WEIGHTS, wei, b);
    bind(DNNL_ARG_DST, dst, velocity_);
    bind_scratch(pd);
  }

  void run(std::span<const Tensor> in, std::span<Tensor> out) override {
    DnnlEpilogue::run(in, out);
    if (weight_decay_ == 0.0f) return;
    const float* p = param_.data<float>();
    float* v = velocity_.data<float>();
    const float wd = weight_decay_;
    const int64_t n = param_.numel();
#pragma omp parallel for simd schedule(static) if (n >= ops::optimizer::kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) v[i] += wd * p[i];
  }

 private:
  Tensor param_, velocity_;
  float weight_decay_;
};

}  // namespace

bool can_precompile(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out) {
  // Blocked activations: the op's kernel picks the algorithm for them (Winograd from 32
  // channels) and stages any channels-last argument.
  if (layout_bits(node) != 0) return false;
  if (node.op == ops::OpKind::conv2d) {
    // A plain Winograd convolution stages its activations through blocked buffers: the op's own
    // kernel does that (and runs the same kernel as eager mode); post-ops keep the direct one.
    if (node.post_ops.empty() && winograd_conv(in[0].dtype(), in[0].shape(), in[1].shape(),
                                               node.attrs.as<ops::ConvAttrs>())) {
      return false;
    }
    // 16 or 32 channels, 3x3, stride 1: the op's kernel runs Kiln's Winograd F(4x4, 3x3)
    // (ops/kernels/conv_winograd.h), faster there than any oneDNN primitive; with post-ops the
    // primitive stays.
    if (node.post_ops.empty() && (in.size() == 2 || in[2].dtype() == DType::f32) &&
        ops::can_run_winograd_3x3(in[0], false, in[1].shape(), node.attrs.as<ops::ConvAttrs>(),
                                  out[0], false) &&
        ops::winograd_3x3_chosen(in[0].shape(), node.attrs.as<ops::ConvAttrs>())) {
      return false;
    }
    // One input channel runs Kiln's own kernel, plain (the op's) or fused with a relu
    // (kernels/single_channel_conv.cpp), not a oneDNN primitive.
    if (can_run_single_channel_conv(node, in, out)) return false;
    return in[0].dtype() == in[1].dtype() && in[1].is_contiguous() && out[0].numel() > 0;
  }
  if (node.op == ops::OpKind::matmul) {
    return in.size() >= 2 && matrix_ok(in[0]) && matrix_ok(in[1]) && out[0].rank() == 2 &&
           out[0].numel() > 0 &&
           in[0].shape()[node.attrs.as<ops::MatmulAttrs>().transpose_a ? 0 : 1] > 0;
  }
  return false;
}

std::shared_ptr<SpecialKernel> make_epilogue_kernel(const Node& node,
                                                    std::span<const Tensor> inputs,
                                                    std::span<const Tensor> outputs) {
  if (!can_precompile(node, inputs, outputs)) {
    throw Error(node_label(node) + ": operands " + describe(inputs[0]) + ", " +
                describe(inputs[1]) + " cannot run as a fused oneDNN primitive");
  }
  if (node.op == ops::OpKind::conv2d) return std::make_shared<ConvEpilogue>(node, inputs, outputs);
  return std::make_shared<MatmulEpilogue>(node, inputs, outputs);
}

int64_t conv_pool_chunk(int64_t batch, int64_t out_bytes_per_image) {
  // A chunk's output stays within a core's L2 until the pool reads it; below 16 images oneDNN's
  // convolution slows down (LeNet's second layer: 130 µs per 64 images in chunks of 32 or 64,
  // 140-150 in chunks of 8).
  constexpr int64_t kChunkBytes = int64_t(256) << 10, kMinImages = 16;
  if (batch * out_bytes_per_image <= kChunkBytes) return 0;
  for (int64_t chunk = kChunkBytes / std::max<int64_t>(out_bytes_per_image, 1); chunk >= kMinImages;
       --chunk) {
    if (batch % chunk == 0) return chunk;
  }
  return 0;
}

std::shared_ptr<SpecialKernel> make_chunked_conv_relu_pool_kernel(const Node& node,
                                                                  std::span<const Tensor> inputs,
                                                                  std::span<const Tensor> outputs) {
  return std::make_shared<ChunkedConvReluPool>(node, inputs, outputs);
}

std::shared_ptr<SpecialKernel> make_matmul_momentum_kernel(const Node& node,
                                                           std::span<const Tensor> inputs,
                                                           std::span<const Tensor>) {
  return std::make_shared<MatmulVelocity>(node, inputs);
}

}  // namespace kiln::graph
