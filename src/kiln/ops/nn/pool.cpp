// 2-D max and average pooling and their backward ops on oneDNN, in the input's own layout
// (channels-last stays channels-last).
//
// Max-pool backward needs to know which element won each window. oneDNN keeps that in a
// "workspace" whose size and layout belong to the implementation, so it cannot be a tensor with
// an inferable shape in the graph, and it would live from forward to backward for every pool.
// max_pool2d_grad instead finds the winners again from x, which the gradient saves anyway:
// non-overlapping f32 windows (the common 2×2/2) in one pass of our own (kernels/
// max_pool_grad.h), anything else by recomputing oneDNN's forward (training mode, workspace into
// scratch) and running its backward primitive. The forward over non-overlapping windows is ours
// too (kernels/max_pool_rows.h): oneDNN's is slow on plain NCHW and on few channels.
#include "kiln/ops/detail/nn_common.h"
#include "kiln/ops/kernels/max_pool_grad.h"
#include "kiln/ops/kernels/max_pool_rows.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using namespace dnnl_util;
using nn::throw_shape_error;

constexpr char kMaxPool[] = "max_pool2d", kMaxPoolGrad[] = "max_pool2d_grad",
               kAvgPool[] = "avg_pool2d", kAvgPoolGrad[] = "avg_pool2d_grad";

Shape pooled_shape(std::string_view op, const Shape& x, const PoolAttrs& a,
                   std::span<const TensorMeta> in) {
  if (x.rank() != 4) throw_shape_error(op, "input must be [N, C, H, W], got " + x.str(), in);
  for (int i = 0; i < 2; ++i) {
    if (a.kernel[i] < 1 || a.stride[i] < 1 || a.padding[i] < 0 || 2 * a.padding[i] > a.kernel[i]) {
      throw_shape_error(
          op,
          detail::concat("bad kernel/stride/padding (", a.kernel[0], ",", a.kernel[1], ")/(",
                         a.stride[0], ",", a.stride[1], ")/(", a.padding[0], ",", a.padding[1],
                         "): padding may be at most half the kernel"),
          in);
    }
  }
  int64_t oh = nn::window_out(x[2], a.kernel[0], a.stride[0], a.padding[0], 1);
  int64_t ow = nn::window_out(x[3], a.kernel[1], a.stride[1], a.padding[1], 1);
  if (oh < 1 || ow < 1) {
    throw_shape_error(op,
                      detail::concat("kernel ", a.kernel[0], "x", a.kernel[1],
                                     " does not fit input ", x[2], "x", x[3]),
                      in);
  }
  return Shape{x[0], x[1], oh, ow};
}

template <const char* Name>
std::vector<TensorMeta> pool_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const PoolAttrs& a = attrs.as<PoolAttrs>();
  nn::check_float(Name, in[0], "input", true, in);
  return {{pooled_shape(Name, in[0].shape, a, in), in[0].dtype, in[0].layout}};
}

dnnl::algorithm pooling_algorithm(bool max) {
  return max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_include_padding;
}

dnnl::pooling_forward::primitive_desc forward_pd(bool max, bool training,
                                                 const dnnl::memory::desc& src,
                                                 const dnnl::memory::desc& dst,
                                                 const PoolAttrs& a) {
  dims strides{a.stride[0], a.stride[1]}, kernel{a.kernel[0], a.kernel[1]},
      pad{a.padding[0], a.padding[1]};
  auto prop = training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  return dnnl::pooling_forward::primitive_desc(
      dnnl::pooling_forward::desc(prop, pooling_algorithm(max), src, dst, strides, kernel, pad,
                                  pad),
      scratchpad_attr(), engine());
}

void add_window_key(PrimitiveKey& key, const PoolAttrs& a) {
  for (int i = 0; i < 2; ++i) key.add(a.kernel[i]).add(a.stride[i]).add(a.padding[i]);
}

// The layout of `like` for `t` (a gradient arriving in another layout is converted once).
Tensor in_layout_of(const Tensor& t, const Tensor& like) {
  if (t.strides() == like.strides()) return t;
  if (like.is_channels_last()) return to_channels_last(t);
  return t.contiguous();
}

template <bool Max>
void pool_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const PoolAttrs& a = attrs.as<PoolAttrs>();
  const char* name = Max ? kMaxPool : kAvgPool;
  Tensor& y = out[0];
  Tensor x = nn::plain(in[0]);  // y was given x's layout by pool_infer
  if (y.numel() == 0) return;
  const bool windows_tile = a.kernel == a.stride && a.padding[0] == 0 && a.padding[1] == 0;
  if (Max && windows_tile && max_pool_rows(x, y, a.kernel)) return;
  PrimitiveKey key;
  key.add(20 + Max).add(x).add(y);
  add_window_key(key, a);
  thread_local PrimitiveCache<PrimitiveRunner> cache;
  PrimitiveRunner& r = cache.get(key, [&] {
    auto src = desc_of(x, name), dst = desc_of(y, name);
    auto pd = forward_pd(Max, false, src, dst, a);
    PrimitiveRunner run(dnnl::pooling_forward(pd), pd);
    run.arg(DNNL_ARG_SRC, src);
    run.arg(DNNL_ARG_DST, dst);
    return run;
  });
  r.set(DNNL_ARG_SRC, x.raw_data());
  r.set(DNNL_ARG_DST, y.raw_data());
  r.run();
}

// ------------------------------------------------------------------------------ backward

// max_pool2d_grad(grad, x) -> dx in x's layout.
std::vector<TensorMeta> max_grad_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const PoolAttrs& a = attrs.as<PoolAttrs>();
  nn::check_float(kMaxPoolGrad, in[0], "grad", true, in);
  if (in[1].dtype != in[0].dtype)
    throw_shape_error(kMaxPoolGrad, "grad and input dtypes differ", in);
  Shape ys = pooled_shape(kMaxPoolGrad, in[1].shape, a, in);
  if (in[0].shape != ys) {
    throw_shape_error(kMaxPoolGrad, "grad shape must be the pooled shape " + ys.str(), in);
  }
  return {in[1]};
}

// avg_pool2d_grad(grad) with attrs.shape = the input shape -> dx in grad's layout.
std::vector<TensorMeta> avg_grad_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const PoolAttrs& a = attrs.as<PoolAttrs>();
  nn::check_float(kAvgPoolGrad, in[0], "grad", true, in);
  Shape xs(a.shape);
  Shape ys = pooled_shape(kAvgPoolGrad, xs, a, in);
  if (in[0].shape != ys) {
    throw_shape_error(kAvgPoolGrad,
                      "grad shape must be the pooled shape " + ys.str() + " of input " + xs.str(),
                      in);
  }
  return {{xs, in[0].dtype, in[0].layout}};
}

struct PoolBwdPrim {
  bool max = false;
  PrimitiveRunner forward;  // max only: recomputes the workspace
  PrimitiveRunner backward;
  size_t y_bytes = 0, ws_bytes = 0;
};

template <bool Max>
void pool_grad_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const PoolAttrs& a = attrs.as<PoolAttrs>();
  const char* name = Max ? kMaxPoolGrad : kAvgPoolGrad;
  Tensor& dx = out[0];
  Tensor x = Max ? in_layout_of(nn::plain(in[1]), dx) : Tensor();
  Tensor dy = in[0];
  if (dx.numel() == 0) return;
  if (Max && can_run_max_pool_grad_one_pass(dy, x, dx, a.kernel, a.stride, a.padding)) {
    max_pool_grad_one_pass(dy, x, dx, a.kernel, false);
    return;
  }
  // dy in the layout dx has, so both sides of the primitive agree.
  Strides dy_strides =
      dx.is_channels_last() ? channels_last_strides(dy.shape()) : contiguous_strides(dy.shape());
  if (dy.strides() != dy_strides) {
    Tensor t = Tensor::empty_strided(dy.shape(), dy_strides, dy.dtype());
    reorder(dy, t);
    dy = t;
  }
  PrimitiveKey key;
  key.add(22 + Max).add(dy).add(dx);
  add_window_key(key, a);
  thread_local PrimitiveCache<PoolBwdPrim> cache;
  PoolBwdPrim& p = cache.get(key, [&] {
    auto diff_src = desc_of(dx, name), diff_dst = desc_of(dy, name);
    auto hint = forward_pd(Max, true, diff_src, diff_dst, a);
    dims strides{a.stride[0], a.stride[1]}, kernel{a.kernel[0], a.kernel[1]},
        pad{a.padding[0], a.padding[1]};
    dnnl::pooling_backward::primitive_desc pd(
        dnnl::pooling_backward::desc(pooling_algorithm(Max), diff_src, diff_dst, strides, kernel,
                                     pad, pad),
        scratchpad_attr(), engine(), hint);
    PoolBwdPrim prim;
    prim.max = Max;
    prim.backward = PrimitiveRunner(dnnl::pooling_backward(pd), pd);
    prim.backward.arg(DNNL_ARG_DIFF_DST, diff_dst);
    prim.backward.arg(DNNL_ARG_DIFF_SRC, diff_src);
    if (Max) {
      prim.forward = PrimitiveRunner(dnnl::pooling_forward(hint), hint);
      prim.forward.arg(DNNL_ARG_SRC, diff_src);
      prim.forward.arg(DNNL_ARG_DST, diff_dst);
      prim.forward.arg(DNNL_ARG_WORKSPACE, hint.workspace_desc());
      prim.backward.arg(DNNL_ARG_WORKSPACE, hint.workspace_desc());
      prim.y_bytes = diff_dst.get_size();
      prim.ws_bytes = hint.workspace_desc().get_size();
    }
    return prim;
  });
  if (Max) {
    Tensor ybuf = Tensor::empty(Shape{int64_t(p.y_bytes)}, DType::u8);
    Tensor ws = Tensor::empty(Shape{int64_t(std::max<size_t>(p.ws_bytes, 1))}, DType::u8);
    p.forward.set(DNNL_ARG_SRC, x.raw_data());
    p.forward.set(DNNL_ARG_DST, ybuf.raw_data());
    p.forward.set(DNNL_ARG_WORKSPACE, ws.raw_data());
    p.forward.run();
    p.backward.set(DNNL_ARG_WORKSPACE, ws.raw_data());
    p.backward.set(DNNL_ARG_DIFF_DST, dy.raw_data());
    p.backward.set(DNNL_ARG_DIFF_SRC, dx.raw_data());
    p.backward.run();
  } else {
    p.backward.set(DNNL_ARG_DIFF_DST, dy.raw_data());
    p.backward.set(DNNL_ARG_DIFF_SRC, dx.raw_data());
    p.backward.run();
  }
}

template <int Passes>
Cost pool_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out,
               const Attrs& attrs) {
  const PoolAttrs& a = attrs.as<PoolAttrs>();
  double window = double(a.kernel[0] * a.kernel[1]);
  double pooled = double(std::min(in[0].shape.numel(), out[0].shape.numel()));
  return {Passes * pooled * window, Passes * (nn::bytes_of(in) + nn::bytes_of(out))};
}

Attrs pool_attrs(const Pool2dOptions& opt) {
  return PoolAttrs{.kernel = opt.kernel, .stride = opt.stride, .padding = opt.padding};
}

}  // namespace

const OpDef op_def_max_pool2d = {
    .name = kMaxPool,
    .attrs = attrs_kind<PoolAttrs>,
    .infer = pool_infer<kMaxPool>,
    .kernel = pool_kernel<true>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {call_one_output(OpKind::max_pool2d_grad, {c.grad_outputs[0], c.inputs[0]}, c.attrs)};
    },
    .saved_inputs = 0b1,
    .amp = AmpClass::follow,
    .f16_kernels = false,
    .cost = pool_cost<1>,
    .shard = &kPool2dShardRule,
};

const OpDef op_def_max_pool2d_grad = {
    .name = kMaxPoolGrad,
    .attrs = attrs_kind<PoolAttrs>,
    .num_inputs = 2,
    .infer = max_grad_infer,
    .kernel = pool_grad_kernel<true>,
    .no_grad_reason = "second-order gradients of max_pool2d are not supported",
    .amp = AmpClass::follow,
    .f16_kernels = false,
    .cost = pool_cost<2>,  // finds the window maxima again
    .no_shard_reason =
        "a backward op: the partition splits the forward graph and graph autodiff differentiates "
        "each rank's local graph",
};

const OpDef op_def_avg_pool2d = {
    .name = kAvgPool,
    .attrs = attrs_kind<PoolAttrs>,
    .infer = pool_infer<kAvgPool>,
    .kernel = pool_kernel<false>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      Attrs a = c.attrs;
      a.as<PoolAttrs>().shape = c.input_metas[0].shape.dims();
      return {call_one_output(OpKind::avg_pool2d_grad, {c.grad_outputs[0]}, a)};
    },
    .amp = AmpClass::follow,
    .f16_kernels = false,
    .cost = pool_cost<1>,
    .shard = &kPool2dShardRule,
};

const OpDef op_def_avg_pool2d_grad = {
    .name = kAvgPoolGrad,
    .attrs = attrs_kind<PoolAttrs>,
    .infer = avg_grad_infer,
    .kernel = pool_grad_kernel<false>,
    // Linear in grad: its gradient is the forward average pool.
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      Attrs a = c.attrs;
      a.as<PoolAttrs>().shape.clear();
      return {call_one_output(OpKind::avg_pool2d, {c.grad_outputs[0]}, a)};
    },
    .amp = AmpClass::follow,
    .f16_kernels = false,
    .cost = pool_cost<1>,
    .no_shard_reason =
        "a backward op: the partition splits the forward graph and graph autodiff differentiates "
        "each rank's local graph",
};

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt) {
  return call_one_output(OpKind::max_pool2d, {x}, pool_attrs(opt));
}
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt) {
  return call_one_output(OpKind::avg_pool2d, {x}, pool_attrs(opt));
}

}  // namespace kiln::ops
