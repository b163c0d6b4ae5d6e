// Softmax cross-entropy with integer class labels, and its backward op. Computed through the
// log-sum-exp of each row shifted by its maximum, so large logits neither overflow nor lose the
// small terms.
#include <cmath>

#include "kiln/ops/detail/nn_common.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using nn::throw_shape_error;

constexpr char kCrossEntropy[] = "softmax_cross_entropy",
               kCrossEntropyGrad[] = "softmax_cross_entropy_grad";

// Checks logits [N, C] and labels [N] for op `op`.
void check_logits_labels(std::string_view op, const TensorMeta& logits, const TensorMeta& labels,
                         const CrossEntropyAttrs& a, std::span<const TensorMeta> in) {
  if (logits.shape.rank() != 2)
    throw_shape_error(op, "logits must be [N, C], got " + logits.shape.str(), in);
  nn::check_float(op, logits, "logits", true, in);
  if (labels.dtype != DType::i32 && labels.dtype != DType::i64) {
    throw_shape_error(op,
                      "labels must be class indices of dtype i32 or i64, got " +
                          std::string(dtype_name(labels.dtype)),
                      in);
  }
  if (labels.shape != Shape{logits.shape[0]}) {
    throw_shape_error(op,
                      "labels must be [" + std::to_string(logits.shape[0]) + "] to match logits " +
                          logits.shape.str() + ", got " + labels.shape.str(),
                      in);
  }
  if (a.reduction < 0 || a.reduction > 2) {
    throw_shape_error(
        op, detail::concat("reduction must be 0 (mean), 1 (sum) or 2 (none), got ", a.reduction),
        in);
  }
}

Shape loss_shape(int64_t n, const CrossEntropyAttrs& a) {
  return a.reduction == 2 ? Shape{n} : Shape{};
}

std::vector<TensorMeta> ce_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const CrossEntropyAttrs& a = attrs.as<CrossEntropyAttrs>();
  check_logits_labels(kCrossEntropy, in[0], in[1], a, in);
  return {{loss_shape(in[0].shape[0], a), in[0].dtype, Layout::contiguous}};
}

std::vector<int64_t> labels_of(std::string_view op, const Tensor& labels, int64_t classes) {
  std::vector<int64_t> v = labels.to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] >= classes) {
      throw Error(detail::concat(op, ": label ", v[i], " at index ", i, " is out of range for ",
                                 classes, " classes"));
    }
  }
  return v;
}

// Log-sum-exp of each row of the [n, c] logits.
void row_logsumexp(const float* x, int64_t n, int64_t c, double* lse) {
#pragma omp parallel for if (n * c > 32768)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * c;
    float m = row[0];
    for (int64_t j = 1; j < c; ++j) m = std::max(m, row[j]);
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(double(row[j] - m));
    lse[i] = double(m) + std::log(s);
  }
}

void ce_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const CrossEntropyAttrs& a = attrs.as<CrossEntropyAttrs>();
  Tensor x = nn::as_f32_row_major(in[0]);
  int64_t n = x.dim(0), c = x.dim(1);
  std::vector<int64_t> labels = labels_of(kCrossEntropy, in[1], c);
  std::vector<double> lse(static_cast<size_t>(n));
  if (c > 0) row_logsumexp(x.data<float>(), n, c, lse.data());
  const float* px = x.data<float>();
  std::vector<float> loss(static_cast<size_t>(n));
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double l = lse[size_t(i)] - double(px[i * c + labels[size_t(i)]]);
    loss[size_t(i)] = float(l);
    total += l;
  }
  Tensor result;
  if (a.reduction == 2) {
    result = Tensor::from_vector(loss, Shape{n});
  } else {
    double v = a.reduction == 0 ? (n > 0 ? total / double(n) : NAN) : total;
    result = Tensor::from_vector(std::vector<float>{float(v)}, Shape{});
  }
  out[0].copy_from(result);
}

std::vector<TensorMeta> ce_grad_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const CrossEntropyAttrs& a = attrs.as<CrossEntropyAttrs>();
  check_logits_labels(kCrossEntropyGrad, in[1], in[2], a, in);
  if (in[0].shape != loss_shape(in[1].shape[0], a)) {
    throw_shape_error(kCrossEntropyGrad,
                      "grad shape " + in[0].shape.str() + " does not match the loss shape " +
                          loss_shape(in[1].shape[0], a).str(),
                      in);
  }
  return {{in[1].shape, in[1].dtype, Layout::contiguous}};
}

// d loss_i / d logits_ij = softmax_ij - [j == label_i], times the gradient reaching loss_i.
void ce_grad_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const CrossEntropyAttrs& a = attrs.as<CrossEntropyAttrs>();
  Tensor g = nn::as_f32_row_major(in[0]);
  Tensor x = nn::as_f32_row_major(in[1]);
  int64_t n = x.dim(0), c = x.dim(1);
  std::vector<int64_t> labels = labels_of(kCrossEntropyGrad, in[2], c);
  std::vector<double> lse(static_cast<size_t>(n));
  if (c > 0) row_logsumexp(x.data<float>(), n, c, lse.data());
  Tensor dx = out[0].dtype() == DType::f32 ? out[0] : Tensor::empty(x.shape(), DType::f32);
  const float *px = x.data<float>(), *pg = g.data<float>();
  float* pd = dx.data<float>();
  double scale = a.reduction == 0 ? 1.0 / double(std::max<int64_t>(n, 1)) : 1.0;
#pragma omp parallel for if (n * c > 32768)
  for (int64_t i = 0; i < n; ++i) {
    double gi = (a.reduction == 2 ? double(pg[i]) : double(pg[0])) * scale;
    for (int64_t j = 0; j < c; ++j) {
      double p = std::exp(double(px[i * c + j]) - lse[size_t(i)]);
      pd[i * c + j] = float(gi * (p - (j == labels[size_t(i)] ? 1.0 : 0.0)));
    }
  }
  if (!dx.same(out[0])) out[0].copy_from(dx);
}

Cost ce_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out, const Attrs&) {
  return {double(in[0].shape.numel()) * 4, nn::bytes_of(in) + nn::bytes_of(out)};
}

}  // namespace

const OpDef op_def_softmax_cross_entropy = {
    .name = kCrossEntropy,
    .attrs = attrs_kind<CrossEntropyAttrs>,
    .num_inputs = 2,
    .infer = ce_infer,
    .kernel = ce_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      Tensor g = call_one_output(OpKind::softmax_cross_entropy_grad,
                                 {c.grad_outputs[0], c.inputs[0], c.inputs[1]}, c.attrs);
      return {g, Tensor()};
    },
    .saved_inputs = 0b11,
    .amp = AmpClass::fp32,
    .f16_kernels = false,
    .cost = ce_cost,
    .shard = &kCrossEntropyShardRule,
};

const OpDef op_def_softmax_cross_entropy_grad = {
    .name = kCrossEntropyGrad,
    .attrs = attrs_kind<CrossEntropyAttrs>,
    .num_inputs = 3,
    .infer = ce_grad_infer,
    .kernel = ce_grad_kernel,
    .no_grad_reason = "second-order gradients of softmax_cross_entropy are not supported",
    .amp = AmpClass::fp32,
    .f16_kernels = false,
    .cost = ce_cost,
    .no_shard_reason =
        "a backward op: the partition splits the forward graph and graph autodiff differentiates "
        "each rank's local graph",
};

Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t reduction) {
  Attrs a = CrossEntropyAttrs{.reduction = reduction};
  return call_one_output(OpKind::softmax_cross_entropy, {logits, labels}, a);
}

}  // namespace kiln::ops
