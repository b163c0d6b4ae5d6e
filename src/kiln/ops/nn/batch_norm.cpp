// Batch normalization over channel dim 1, and its backward op, in the input's own layout.
// Training uses the batch statistics and updates running_mean/running_var in place; eval uses
// the running statistics. saved_inv_std = 1/sqrt(var + eps) is what a backward pass and graph
// fusion want.
//
// Channels-last 4-D and row-major 2-D data (rows × C, the channel innermost: what convolutions
// and linear layers produce here) run on the hand-written kernels of batch_norm_rows.h, which
// are several times faster than oneDNN 2.6's there, bf16 above all. Other layouts (NCHW, [N, C,
// L]) run on oneDNN, whose backward takes the variance, recovered as 1/inv_std² - eps (exact to
// float rounding of var + eps, which is the quantity the backward uses).
#include <cmath>

#include "kiln/ops/detail/nn_common.h"
#include "kiln/ops/kernels/batch_norm_rows.h"
#include "kiln/ops/kernels/copy.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using namespace dnnl_util;
using nn::throw_shape_error;

constexpr char kBatchNorm[] = "batch_norm", kBatchNormGrad[] = "batch_norm_grad";

void check_vector(std::string_view op, const TensorMeta& m, int64_t c, const char* what,
                  std::span<const TensorMeta> in) {
  if (m.shape != Shape{c} || m.dtype != DType::f32) {
    throw_shape_error(op,
                      detail::concat(what, " must be f32[", c, "] for ", c, " channels, got ",
                                     dtype_name(m.dtype), m.shape.str()),
                      in);
  }
}

int64_t channels(std::string_view op, const TensorMeta& x, std::span<const TensorMeta> in) {
  if (x.shape.rank() < 2)
    throw_shape_error(op, "input must be [N, C, ...], got " + x.shape.str(), in);
  nn::check_float(op, x, "input", true, in);
  return x.shape[1];
}

std::vector<TensorMeta> bn_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const BatchNormAttrs& a = attrs.as<BatchNormAttrs>();
  int64_t c = channels(kBatchNorm, in[0], in);
  const char* names[] = {"", "gamma", "beta", "running_mean", "running_var"};
  for (int i = 1; i < 5; ++i) check_vector(kBatchNorm, in[size_t(i)], c, names[i], in);
  if (!(a.eps > 0))
    throw_shape_error(kBatchNorm, detail::concat("eps must be > 0, got ", a.eps), in);
  if (a.batch_slices < 1 || (a.sync_ranks && a.batch_slices != 1)) {
    throw_shape_error(kBatchNorm,
                      detail::concat("batch_slices must be >= 1 (and 1 with sync_ranks), got ",
                                     a.batch_slices, a.sync_ranks ? " with sync_ranks" : ""),
                      in);
  }
  TensorMeta stat{Shape{c}, DType::f32, Layout::contiguous};
  return {in[0], stat, stat};
}

dnnl::normalization_flags bn_flags(bool training) {
  auto f = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  return training ? f : f | dnnl::normalization_flags::use_global_stats;
}

dnnl::batch_normalization_forward::primitive_desc forward_pd(const dnnl::memory::desc& data,
                                                             bool training, double eps) {
  return dnnl::batch_normalization_forward::primitive_desc(
      dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, data, float(eps),
                                              bn_flags(training)),
      scratchpad_attr(), engine());
}

// x in y's layout (y's layout was chosen from x's meta, so only odd strides need a copy).
Tensor same_layout(const Tensor& t, const Tensor& like) {
  if (t.strides() == like.strides()) return t;
  if (like.is_channels_last()) return to_channels_last(t);
  return t.contiguous();
}

float* f32_data(const Tensor& t, std::string_view op, const char* what) {
  if (!t.is_contiguous()) throw Error(std::string(op) + ": " + what + " must be contiguous");
  return t.data<float>();
}

// Statistics combined across a batch's parts (batch_norm_parts.h) run on the rows kernels alone:
// a tensor in another layout goes through a rows-by-channels copy (channels-last for 4-D).
Tensor rows_copy(const Tensor& t, std::string_view op) {
  const Tensor rows = t.rank() == 4 ? to_channels_last(t) : t.contiguous();
  if (!is_rows_by_channels(rows) || !can_run_batch_norm_rows(rows, {})) {
    throw Error(std::string(op) + ": statistics combined across a batch's parts need f32 or bf16 " +
                "[N, C] or [N, C, H, W] data, got " + describe(t));
  }
  return rows;
}

void bn_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const BatchNormAttrs& a = attrs.as<BatchNormAttrs>();
  Tensor& y = out[0];
  Tensor x = same_layout(in[0], y);
  Tensor gamma = nn::row_major(in[1]), beta = nn::row_major(in[2]);
  float* rm = f32_data(in[3], kBatchNorm, "running_mean");
  float* rv = f32_data(in[4], kBatchNorm, "running_var");
  // Graph mode may hand x and y over in oneDNN's blocked layout (BatchNormAttrs::nchw16c): only the
  // rows kernels read it.
  const bool blocked = a.nchw16c != 0;
  const auto parts = batch_parts(kBatchNorm, a);
  const BatchNormRowsOptions options{.training = a.training,
                                     .momentum = a.momentum,
                                     .eps = a.eps,
                                     .relu = false,
                                     .blocked = blocked,
                                     .parts = parts.get()};
  if (blocked || can_run_batch_norm_rows(x, {&y})) {
    batch_norm_rows_forward(x, gamma, beta, in[3], in[4], nullptr, options, y, out[1], out[2]);
    return;
  }
  if (parts != nullptr) {
    const Tensor xr = rows_copy(x, kBatchNorm);
    const Tensor yr = Tensor::empty_like(xr);
    batch_norm_rows_forward(xr, gamma, beta, in[3], in[4], nullptr, options, yr, out[1], out[2]);
    strided_copy(yr, y);
    return;
  }
  int64_t c = x.dim(1);
  float* mean = out[1].data<float>();
  float* inv_std = out[2].data<float>();
  int64_t count = x.numel() / std::max<int64_t>(c, 1);
  if (x.numel() == 0) {
    for (int64_t i = 0; i < c; ++i) {
      mean[i] = a.training ? 0.f : rm[i];
      inv_std[i] = float(1.0 / std::sqrt((a.training ? 0.0 : rv[i]) + a.eps));
    }
    return;
  }
  PrimitiveKey key;
  key.add(30 + a.training).add(x).add_double(a.eps);
  thread_local PrimitiveCache<PrimitiveRunner> cache;
  PrimitiveRunner& r = cache.get(key, [&] {
    auto data = desc_of(x, kBatchNorm);
    auto pd = forward_pd(data, a.training, a.eps);
    PrimitiveRunner run(dnnl::batch_normalization_forward(pd), pd);
    run.arg(DNNL_ARG_SRC, data);
    run.arg(DNNL_ARG_DST, data);
    run.arg(DNNL_ARG_SCALE, vector_desc(c));
    run.arg(DNNL_ARG_SHIFT, vector_desc(c));
    run.arg(DNNL_ARG_MEAN, vector_desc(c));
    run.arg(DNNL_ARG_VARIANCE, vector_desc(c));
    return run;
  });
  std::vector<float> batch_var(static_cast<size_t>(c));
  r.set(DNNL_ARG_SRC, x.raw_data());
  r.set(DNNL_ARG_DST, y.raw_data());
  r.set(DNNL_ARG_SCALE, gamma.raw_data());
  r.set(DNNL_ARG_SHIFT, beta.raw_data());
  r.set(DNNL_ARG_MEAN, a.training ? static_cast<void*>(mean) : rm);
  r.set(DNNL_ARG_VARIANCE, a.training ? static_cast<void*>(batch_var.data()) : rv);
  r.run();
  if (!a.training) {
    for (int64_t i = 0; i < c; ++i) {
      mean[i] = rm[i];
      inv_std[i] = float(1.0 / std::sqrt(double(rv[i]) + a.eps));
    }
    return;
  }
  // Running variance takes the unbiased batch variance, as PyTorch and MindSpore do.
  double m = a.momentum, unbias = count > 1 ? double(count) / double(count - 1) : 1.0;
  for (int64_t i = 0; i < c; ++i) {
    double var = batch_var[size_t(i)];
    inv_std[i] = float(1.0 / std::sqrt(var + a.eps));
    rm[i] = float(m * rm[i] + (1 - m) * mean[i]);
    rv[i] = float(m * rv[i] + (1 - m) * var * unbias);
  }
}

std::vector<Tensor> bn_grad(const GradCtx& c) {
  const BatchNormAttrs& bn = c.attrs.as<BatchNormAttrs>();
  Attrs a = BatchNormAttrs{.training = bn.training,
                           .eps = bn.eps,
                           .batch_slices = bn.batch_slices,
                           .sync_ranks = bn.sync_ranks};
  std::vector<Tensor> g =
      call(OpKind::batch_norm_grad,
           {c.grad_outputs[0], c.inputs[0], c.inputs[1], c.outputs[1], c.outputs[2]}, a);
  return {g[0], g[1], g[2], Tensor(), Tensor()};
}

// batch_norm_grad(grad, x, gamma, saved_mean, saved_inv_std) -> {dx, dgamma, dbeta}.
std::vector<TensorMeta> bn_grad_infer(std::span<const TensorMeta> in, const Attrs&) {
  int64_t c = channels(kBatchNormGrad, in[1], in);
  if (in[0].shape != in[1].shape || in[0].dtype != in[1].dtype) {
    throw_shape_error(kBatchNormGrad, "grad must match the input's shape and dtype", in);
  }
  const char* names[] = {"", "", "gamma", "saved_mean", "saved_inv_std"};
  for (int i = 2; i < 5; ++i) check_vector(kBatchNormGrad, in[size_t(i)], c, names[i], in);
  TensorMeta stat{Shape{c}, DType::f32, Layout::contiguous};
  return {in[1], stat, stat};
}

void bn_grad_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const BatchNormAttrs& a = attrs.as<BatchNormAttrs>();
  Tensor& dx = out[0];
  Tensor x = same_layout(in[1], dx);
  Tensor dy = same_layout(in[0], dx);
  Tensor gamma = nn::row_major(in[2]), mean = nn::row_major(in[3]);
  Tensor inv_std = nn::row_major(in[4]);
  const bool blocked = a.nchw16c != 0;  // as in bn_kernel
  const auto parts = batch_parts(kBatchNormGrad, a);
  if (blocked || can_run_batch_norm_rows(x, {&dy, &dx})) {
    batch_norm_rows_backward(dy, nullptr, x, gamma, mean, inv_std, a.training, dx, out[1], out[2],
                             blocked, nullptr, parts.get());
    return;
  }
  if (parts != nullptr) {
    const Tensor xr = rows_copy(x, kBatchNormGrad);
    const Tensor dyr = same_layout(dy, xr);
    const Tensor dxr = Tensor::empty_like(xr);
    batch_norm_rows_backward(dyr, nullptr, xr, gamma, mean, inv_std, a.training, dxr, out[1],
                             out[2], false, nullptr, parts.get());
    strided_copy(dxr, dx);
    return;
  }
  int64_t c = x.dim(1);
  if (x.numel() == 0) {
    std::memset(out[1].raw_data(), 0, out[1].nbytes());
    std::memset(out[2].raw_data(), 0, out[2].nbytes());
    return;
  }
  std::vector<float> var(static_cast<size_t>(c));
  const float* is = inv_std.data<float>();
  for (int64_t i = 0; i < c; ++i) {
    var[size_t(i)] = float(1.0 / (double(is[i]) * double(is[i])) - a.eps);
  }
  PrimitiveKey key;
  key.add(32 + a.training).add(x).add_double(a.eps);
  thread_local PrimitiveCache<PrimitiveRunner> cache;
  PrimitiveRunner& r = cache.get(key, [&] {
    auto data = desc_of(x, kBatchNormGrad);
    auto hint = forward_pd(data, a.training, a.eps);
    dnnl::batch_normalization_backward::primitive_desc pd(
        dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, data, data,
                                                 float(a.eps), bn_flags(a.training)),
        scratchpad_attr(), engine(), hint);
    PrimitiveRunner run(dnnl::batch_normalization_backward(pd), pd);
    run.arg(DNNL_ARG_SRC, data);
    run.arg(DNNL_ARG_DIFF_DST, data);
    run.arg(DNNL_ARG_DIFF_SRC, data);
    for (int arg : {DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_SCALE, DNNL_ARG_SHIFT,
                    DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT}) {
      run.arg(arg, vector_desc(c));
    }
    return run;
  });
  nn::run_normalization_backward(r, x, dy, dx.raw_data(), mean, var.data(), gamma, out[1], out[2]);
}

}  // namespace

const OpDef op_def_batch_norm = {
    .name = kBatchNorm,
    .attrs = attrs_kind<BatchNormAttrs>,
    .num_inputs = 5,  // x, gamma, beta, running_mean, running_var
    .num_outputs = 3,
    .infer = bn_infer,
    .kernel = bn_kernel,
    .grad = bn_grad,
    .saved_inputs = 0b00011,
    .saves_outputs = true,
    .mutated_inputs = 0b11000,  // running_mean, running_var (in training)
    .amp = AmpClass::fp32,
    .f16_kernels = false,
    .cost = nn::normalization_cost<5>,
    .shard = &kBatchNormShardRule,
};

const OpDef op_def_batch_norm_grad = {
    .name = kBatchNormGrad,
    .attrs = attrs_kind<BatchNormAttrs>,
    .num_inputs = 5,
    .num_outputs = 3,
    .infer = bn_grad_infer,
    .kernel = bn_grad_kernel,
    .no_grad_reason = "second-order gradients of batch_norm are not supported",
    .amp = AmpClass::fp32,
    .f16_kernels = false,
    .cost = nn::normalization_cost<8>,
    .no_shard_reason =
        "a backward op: the partition splits the forward graph and graph autodiff differentiates "
        "each rank's local graph",
};

std::vector<Tensor> batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var, bool training,
                               double momentum, double eps, bool sync_ranks) {
  Attrs a = BatchNormAttrs{
      .training = training, .momentum = momentum, .eps = eps, .sync_ranks = sync_ranks};
  return call(OpKind::batch_norm, {x, gamma, beta, running_mean, running_var}, a);
}

}  // namespace kiln::ops
