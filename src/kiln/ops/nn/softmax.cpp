// Softmax and log-softmax along one axis, and their backward ops, on oneDNN (softmax_v2: one
// primitive family for both, any axis, any strides).
#include "kiln/ops/detail/nn_common.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using namespace dnnl_util;
using nn::throw_shape_error;

constexpr char kSoftmax[] = "softmax", kLogSoftmax[] = "log_softmax",
               kSoftmaxGrad[] = "softmax_grad", kLogSoftmaxGrad[] = "log_softmax_grad";

int64_t axis_of(std::string_view op, const TensorMeta& x, const Attrs& attrs,
                std::span<const TensorMeta> in) {
  const int64_t given = attrs.as<AxisAttrs>().axis;
  int64_t r = x.shape.rank();
  int64_t axis = given < 0 ? given + r : given;
  if (r == 0 || axis < 0 || axis >= r) {
    throw_shape_error(op, detail::concat("axis ", given, " is out of range for rank ", r), in);
  }
  return axis;
}

template <const char* Name>
std::vector<TensorMeta> forward_infer(std::span<const TensorMeta> in, const Attrs& a) {
  nn::check_float(Name, in[0], "input", true, in);
  axis_of(Name, in[0], a, in);
  return {in[0]};
}

template <const char* Name>
std::vector<TensorMeta> backward_infer(std::span<const TensorMeta> in, const Attrs& a) {
  nn::check_float(Name, in[0], "grad", true, in);
  if (in[0].shape != in[1].shape || in[0].dtype != in[1].dtype) {
    throw_shape_error(Name, "grad and output must have the same shape and dtype", in);
  }
  axis_of(Name, in[1], a, in);
  return {in[1]};
}

dnnl::algorithm softmax_algorithm(bool log) {
  return log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
}

dnnl::softmax_v2_forward::primitive_desc forward_pd(const dnnl::memory::desc& src,
                                                    const dnnl::memory::desc& dst, int axis,
                                                    bool log) {
  return dnnl::softmax_v2_forward::primitive_desc(
      dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_training, softmax_algorithm(log), src,
                                     dst, axis),
      scratchpad_attr(), engine());
}

template <bool Log>
void forward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const char* name = Log ? kLogSoftmax : kSoftmax;
  Tensor x = nn::plain(in[0]);
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  if (x.strides() != y.strides()) x = x.contiguous();  // y's layout was chosen from in[0]'s
  int axis = int(axis_of(name, meta_of(x), a, {}));
  PrimitiveKey key;
  key.add(10 + Log).add(x).add(axis);
  thread_local PrimitiveCache<PrimitiveRunner> cache;
  PrimitiveRunner& r = cache.get(key, [&] {
    auto src = desc_of(x, name), dst = desc_of(y, name);
    auto pd = forward_pd(src, dst, axis, Log);
    PrimitiveRunner run(dnnl::softmax_v2_forward(pd), pd);
    run.arg(DNNL_ARG_SRC, src);
    run.arg(DNNL_ARG_DST, dst);
    return run;
  });
  r.set(DNNL_ARG_SRC, x.raw_data());
  r.set(DNNL_ARG_DST, y.raw_data());
  r.run();
}

template <bool Log>
void backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const char* name = Log ? kLogSoftmaxGrad : kSoftmaxGrad;
  Tensor g = nn::plain(in[0]), y = nn::plain(in[1]);
  Tensor& dx = out[0];
  if (dx.numel() == 0) return;
  if (g.strides() != dx.strides()) g = g.contiguous();
  if (y.strides() != dx.strides()) y = y.contiguous();
  if (g.strides() != dx.strides() || y.strides() != dx.strides()) {
    // dx is row-major here; bring everything there.
    Tensor tmp = Tensor::empty(dx.shape(), dx.dtype());
    run_kernel(Log ? OpKind::log_softmax_grad : OpKind::softmax_grad,
               std::vector<Tensor>{g.contiguous(), y.contiguous()}, std::span<Tensor>(&tmp, 1), a);
    reorder(tmp, dx);
    return;
  }
  int axis = int(axis_of(name, meta_of(y), a, {}));
  PrimitiveKey key;
  key.add(12 + Log).add(g).add(axis);
  thread_local PrimitiveCache<PrimitiveRunner> cache;
  PrimitiveRunner& r = cache.get(key, [&] {
    auto md = desc_of(g, name);
    auto hint = forward_pd(md, md, axis, Log);
    dnnl::softmax_v2_backward::primitive_desc pd(
        dnnl::softmax_v2_backward::desc(softmax_algorithm(Log), md, md, md, axis),
        scratchpad_attr(), engine(), hint);
    PrimitiveRunner run(dnnl::softmax_v2_backward(pd), pd);
    run.arg(DNNL_ARG_DIFF_DST, md);
    run.arg(DNNL_ARG_DST, md);
    run.arg(DNNL_ARG_DIFF_SRC, md);
    return run;
  });
  r.set(DNNL_ARG_DIFF_DST, g.raw_data());
  r.set(DNNL_ARG_DST, y.raw_data());
  r.set(DNNL_ARG_DIFF_SRC, dx.raw_data());
  r.run();
}

template <int FlopsPerElement>
Cost elementwise_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out,
                      const Attrs&) {
  return {double(out[0].shape.numel()) * FlopsPerElement, nn::bytes_of(in) + nn::bytes_of(out)};
}

Attrs axis_attrs(int64_t axis) {
  Attrs a = AxisAttrs{.axis = axis};
  return a;
}

}  // namespace

const OpDef op_def_softmax = {
    .name = kSoftmax,
    .attrs = attrs_kind<AxisAttrs>,
    .infer = forward_infer<kSoftmax>,
    .kernel = forward_kernel<false>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {softmax_grad(c.grad_outputs[0], c.outputs[0], c.attrs.as<AxisAttrs>().axis)};
    },
    .saves_outputs = true,
    .amp = AmpClass::fp32,
    .f16_kernels = false,
    .cost = elementwise_cost<5>,
    .shard = &kSoftmaxShardRule,
};

const OpDef op_def_log_softmax = {
    .name = kLogSoftmax,
    .attrs = attrs_kind<AxisAttrs>,
    .infer = forward_infer<kLogSoftmax>,
    .kernel = forward_kernel<true>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {log_softmax_grad(c.grad_outputs[0], c.outputs[0], c.attrs.as<AxisAttrs>().axis)};
    },
    .saves_outputs = true,
    .amp = AmpClass::fp32,
    .f16_kernels = false,
    .cost = elementwise_cost<5>,
    .shard = &kSoftmaxShardRule,
};

const OpDef op_def_softmax_grad = {
    .name = kSoftmaxGrad,
    .attrs = attrs_kind<AxisAttrs>,
    .num_inputs = 2,
    .infer = backward_infer<kSoftmaxGrad>,
    .kernel = backward_kernel<false>,
    .no_grad_reason = "second-order gradients of softmax are not supported",
    .amp = AmpClass::fp32,
    .f16_kernels = false,
    .cost = elementwise_cost<4>,
    .no_shard_reason =
        "a backward op: the partition splits the forward graph and graph autodiff differentiates "
        "each rank's local graph",
};

const OpDef op_def_log_softmax_grad = {
    .name = kLogSoftmaxGrad,
    .attrs = attrs_kind<AxisAttrs>,
    .num_inputs = 2,
    .infer = backward_infer<kLogSoftmaxGrad>,
    .kernel = backward_kernel<true>,
    .no_grad_reason = "second-order gradients of log_softmax are not supported",
    .amp = AmpClass::fp32,
    .f16_kernels = false,
    .cost = elementwise_cost<4>,
    .no_shard_reason =
        "a backward op: the partition splits the forward graph and graph autodiff differentiates "
        "each rank's local graph",
};

Tensor softmax(const Tensor& x, int64_t axis) {
  return call_one_output(OpKind::softmax, {x}, axis_attrs(axis));
}
Tensor log_softmax(const Tensor& x, int64_t axis) {
  return call_one_output(OpKind::log_softmax, {x}, axis_attrs(axis));
}
Tensor softmax_grad(const Tensor& grad, const Tensor& y, int64_t axis) {
  return call_one_output(OpKind::softmax_grad, {grad, y}, axis_attrs(axis));
}
Tensor log_softmax_grad(const Tensor& grad, const Tensor& y, int64_t axis) {
  return call_one_output(OpKind::log_softmax_grad, {grad, y}, axis_attrs(axis));
}

}  // namespace kiln::ops
