// Layer normalization over the trailing gamma.rank() dims, and its backward op, on oneDNN (which
// normalizes over the last dim: the trailing dims are flattened into one). Returns
// {y, mean, inv_std}; the statistics have the shape of the leading dims.
#include <cmath>

#include "kiln/ops/detail/nn_common.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using namespace dnnl_util;
using nn::throw_shape_error;

constexpr char kLayerNorm[] = "layer_norm", kLayerNormGrad[] = "layer_norm_grad";

// Shape of the statistics: x's shape without the normalized trailing dims.
Shape stat_shape(std::string_view op, const TensorMeta& x, const TensorMeta& gamma,
                 std::span<const TensorMeta> in) {
  nn::check_float(op, x, "input", true, in);
  int k = gamma.shape.rank(), r = x.shape.rank();
  if (k < 1 || k > r ||
      !std::equal(gamma.shape.begin(), gamma.shape.end(), x.shape.begin() + (r - k))) {
    throw_shape_error(op, "gamma's shape must equal the input's trailing dims", in);
  }
  if (gamma.dtype != DType::f32) throw_shape_error(op, "gamma must be f32", in);
  return Shape(std::vector<int64_t>(x.shape.begin(), x.shape.begin() + (r - k)));
}

std::vector<TensorMeta> ln_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const LayerNormAttrs& a = attrs.as<LayerNormAttrs>();
  Shape s = stat_shape(kLayerNorm, in[0], in[1], in);
  if (in[2].shape != in[1].shape || in[2].dtype != DType::f32) {
    throw_shape_error(kLayerNorm, "beta must be f32 with gamma's shape", in);
  }
  if (!(a.eps > 0))
    throw_shape_error(kLayerNorm, detail::concat("eps must be > 0, got ", a.eps), in);
  TensorMeta stat{s, DType::f32, Layout::contiguous};
  return {{in[0].shape, in[0].dtype, Layout::contiguous}, stat, stat};
}

const auto kFlags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

struct Rows {
  int64_t m, d;
};
Rows rows_of(const Tensor& x, const Tensor& gamma) {
  int64_t d = gamma.numel();
  return {d > 0 ? x.numel() / d : 0, d};
}

dnnl::layer_normalization_forward::primitive_desc forward_pd(const dnnl::memory::desc& data,
                                                             double eps) {
  return dnnl::layer_normalization_forward::primitive_desc(
      dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, data, float(eps),
                                              kFlags),
      scratchpad_attr(), engine());
}

dnnl::memory::desc data_desc(Rows r, DType dtype) {
  return dnnl::memory::desc({r.m, r.d}, data_type(dtype, kLayerNorm), tag::ab);
}

void ln_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const LayerNormAttrs& a = attrs.as<LayerNormAttrs>();
  Tensor x = nn::row_major(in[0]);
  Tensor gamma = nn::row_major(in[1]), beta = nn::row_major(in[2]);
  Rows rows = rows_of(x, gamma);
  if (rows.m == 0 || rows.d == 0) return;
  PrimitiveKey key;
  key.add(40).add(rows.m).add(rows.d).add(int64_t(x.dtype())).add_double(a.eps);
  thread_local PrimitiveCache<PrimitiveRunner> cache;
  PrimitiveRunner& r = cache.get(key, [&] {
    auto data = data_desc(rows, x.dtype());
    auto pd = forward_pd(data, a.eps);
    PrimitiveRunner run(dnnl::layer_normalization_forward(pd), pd);
    run.arg(DNNL_ARG_SRC, data);
    run.arg(DNNL_ARG_DST, data);
    run.arg(DNNL_ARG_SCALE, vector_desc(rows.d));
    run.arg(DNNL_ARG_SHIFT, vector_desc(rows.d));
    run.arg(DNNL_ARG_MEAN, vector_desc(rows.m));
    run.arg(DNNL_ARG_VARIANCE, vector_desc(rows.m));
    return run;
  });
  float* inv_std = out[2].data<float>();  // holds the variance until converted below
  r.set(DNNL_ARG_SRC, x.raw_data());
  r.set(DNNL_ARG_DST, out[0].raw_data());
  r.set(DNNL_ARG_SCALE, gamma.raw_data());
  r.set(DNNL_ARG_SHIFT, beta.raw_data());
  r.set(DNNL_ARG_MEAN, out[1].raw_data());
  r.set(DNNL_ARG_VARIANCE, inv_std);
  r.run();
  for (int64_t i = 0; i < rows.m; ++i)
    inv_std[i] = float(1.0 / std::sqrt(double(inv_std[i]) + a.eps));
}

// layer_norm_grad(grad, x, gamma, mean, inv_std) -> {dx, dgamma, dbeta}.
std::vector<TensorMeta> ln_grad_infer(std::span<const TensorMeta> in, const Attrs&) {
  Shape s = stat_shape(kLayerNormGrad, in[1], in[2], in);
  if (in[0].shape != in[1].shape || in[0].dtype != in[1].dtype) {
    throw_shape_error(kLayerNormGrad, "grad must match the input's shape and dtype", in);
  }
  for (int i = 3; i < 5; ++i) {
    if (in[size_t(i)].shape != s || in[size_t(i)].dtype != DType::f32) {
      throw_shape_error(kLayerNormGrad, "mean and inv_std must be f32" + s.str(), in);
    }
  }
  TensorMeta param{in[2].shape, DType::f32, Layout::contiguous};
  return {{in[1].shape, in[1].dtype, Layout::contiguous}, param, param};
}

void ln_grad_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const LayerNormAttrs& a = attrs.as<LayerNormAttrs>();
  Tensor dy = nn::row_major(in[0]), x = nn::row_major(in[1]), gamma = nn::row_major(in[2]);
  Tensor mean = nn::row_major(in[3]), inv_std = nn::row_major(in[4]);
  Rows rows = rows_of(x, gamma);
  if (rows.m == 0 || rows.d == 0) {
    std::memset(out[1].raw_data(), 0, out[1].nbytes());
    std::memset(out[2].raw_data(), 0, out[2].nbytes());
    return;
  }
  Tensor var = Tensor::empty(Shape{rows.m}, DType::f32);
  const float* is = inv_std.data<float>();
  float* pv = var.data<float>();
  for (int64_t i = 0; i < rows.m; ++i) pv[i] = float(1.0 / (double(is[i]) * double(is[i])) - a.eps);
  PrimitiveKey key;
  key.add(41).add(rows.m).add(rows.d).add(int64_t(x.dtype())).add_double(a.eps);
  thread_local PrimitiveCache<PrimitiveRunner> cache;
  PrimitiveRunner& r = cache.get(key, [&] {
    auto data = data_desc(rows, x.dtype());
    auto hint = forward_pd(data, a.eps);
    dnnl::layer_normalization_backward::primitive_desc pd(
        dnnl::layer_normalization_backward::desc(dnnl::prop_kind::backward, data, data,
                                                 float(a.eps), kFlags),
        scratchpad_attr(), engine(), hint);
    PrimitiveRunner run(dnnl::layer_normalization_backward(pd), pd);
    run.arg(DNNL_ARG_SRC, data);
    run.arg(DNNL_ARG_DIFF_DST, data);
    run.arg(DNNL_ARG_DIFF_SRC, data);
    run.arg(DNNL_ARG_MEAN, vector_desc(rows.m));
    run.arg(DNNL_ARG_VARIANCE, vector_desc(rows.m));
    run.arg(DNNL_ARG_SCALE, vector_desc(rows.d));
    run.arg(DNNL_ARG_SHIFT, vector_desc(rows.d));
    run.arg(DNNL_ARG_DIFF_SCALE, vector_desc(rows.d));
    run.arg(DNNL_ARG_DIFF_SHIFT, vector_desc(rows.d));
    return run;
  });
  nn::run_normalization_backward(r, x, dy, out[0].raw_data(), mean, pv, gamma, out[1], out[2]);
}

}  // namespace

const OpDef op_def_layer_norm = {
    .name = kLayerNorm,
    .attrs = attrs_kind<LayerNormAttrs>,
    .num_inputs = 3,
    .num_outputs = 3,
    .infer = ln_infer,
    .kernel = ln_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Attrs& a = c.attrs;
      std::vector<Tensor> g =
          call(OpKind::layer_norm_grad,
               {c.grad_outputs[0], c.inputs[0], c.inputs[1], c.outputs[1], c.outputs[2]}, a);
      return {g[0], g[1], g[2]};
    },
    .saved_inputs = 0b011,
    .saves_outputs = true,
    .amp = AmpClass::fp32,
    .f16_kernels = false,
    .cost = nn::normalization_cost<5>,
    .shard = &kLayerNormShardRule,
};

const OpDef op_def_layer_norm_grad = {
    .name = kLayerNormGrad,
    .attrs = attrs_kind<LayerNormAttrs>,
    .num_inputs = 5,
    .num_outputs = 3,
    .infer = ln_grad_infer,
    .kernel = ln_grad_kernel,
    .no_grad_reason = "second-order gradients of layer_norm are not supported",
    .amp = AmpClass::fp32,
    .f16_kernels = false,
    .cost = nn::normalization_cost<8>,
    .no_shard_reason =
        "a backward op: the partition splits the forward graph and graph autodiff differentiates "
        "each rank's local graph",
};

std::vector<Tensor> layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               double eps) {
  Attrs a = LayerNormAttrs{.eps = eps};
  return call(OpKind::layer_norm, {x, gamma, beta}, a);
}

}  // namespace kiln::ops
