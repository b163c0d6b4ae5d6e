// Embedding lookup (rows of a table gathered by integer indices) and its backward op, a
// scatter-add of the gradient rows into a zero table.
#include <cstring>

#include "kiln/ops/detail/nn_common.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using nn::throw_shape_error;

constexpr char kEmbedding[] = "embedding", kEmbeddingGrad[] = "embedding_grad";

void check_indices(std::string_view op, const TensorMeta& idx, std::span<const TensorMeta> in) {
  if (idx.dtype != DType::i32 && idx.dtype != DType::i64) {
    throw_shape_error(
        op, "indices must have dtype i32 or i64, got " + std::string(dtype_name(idx.dtype)), in);
  }
}

std::vector<int64_t> indices_of(std::string_view op, const Tensor& idx, int64_t rows) {
  std::vector<int64_t> v = idx.to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] >= rows) {
      throw Error(detail::concat(op, ": index ", v[i], " at position ", i,
                                 " is out of range for a table of ", rows, " rows"));
    }
  }
  return v;
}

std::vector<TensorMeta> embedding_infer(std::span<const TensorMeta> in, const Attrs&) {
  if (in[0].shape.rank() != 2)
    throw_shape_error(kEmbedding, "table must be [V, D], got " + in[0].shape.str(), in);
  nn::check_float(kEmbedding, in[0], "table", true, in);
  check_indices(kEmbedding, in[1], in);
  std::vector<int64_t> out = in[1].shape.dims();
  out.push_back(in[0].shape[1]);
  return {{Shape(std::move(out)), in[0].dtype, Layout::contiguous}};
}

void embedding_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  Tensor table = nn::row_major(in[0]);
  int64_t rows = table.dim(0), d = table.dim(1);
  std::vector<int64_t> idx = indices_of(kEmbedding, in[1], rows);
  size_t row_bytes = size_t(d) * dtype_size(table.dtype());
  const auto* src = static_cast<const char*>(table.raw_data());
  auto* dst = static_cast<char*>(out[0].raw_data());
  for (size_t i = 0; i < idx.size(); ++i) {
    std::memcpy(dst + i * row_bytes, src + size_t(idx[i]) * row_bytes, row_bytes);
  }
}

// attrs.num_classes is the table's row count.
std::vector<TensorMeta> embedding_grad_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const EmbeddingGradAttrs& a = attrs.as<EmbeddingGradAttrs>();
  nn::check_float(kEmbeddingGrad, in[0], "grad", true, in);
  check_indices(kEmbeddingGrad, in[1], in);
  const Shape& g = in[0].shape;
  if (g.rank() != in[1].shape.rank() + 1 ||
      !std::equal(in[1].shape.begin(), in[1].shape.end(), g.begin())) {
    throw_shape_error(kEmbeddingGrad, "grad must be indices.shape + [D]", in);
  }
  if (a.num_rows < 1) throw_shape_error(kEmbeddingGrad, "num_rows (table rows) must be >= 1", in);
  return {{Shape{a.num_rows, g[g.rank() - 1]}, in[0].dtype, Layout::contiguous}};
}

void embedding_grad_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const EmbeddingGradAttrs& a = attrs.as<EmbeddingGradAttrs>();
  Tensor g = nn::as_f32_row_major(in[0]);
  int64_t d = out[0].dim(1);
  std::vector<int64_t> idx = indices_of(kEmbeddingGrad, in[1], a.num_rows);
  Tensor acc = out[0].dtype() == DType::f32 ? out[0] : Tensor::empty(out[0].shape(), DType::f32);
  float* pa = acc.data<float>();
  std::memset(pa, 0, size_t(acc.numel()) * sizeof(float));
  const float* pg = g.data<float>();
  for (size_t i = 0; i < idx.size(); ++i) {
    float* row = pa + idx[i] * d;
    const float* gr = pg + int64_t(i) * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) row[j] += gr[j];
  }
  if (!acc.same(out[0])) out[0].copy_from(acc);
}

Cost embedding_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out, const Attrs&) {
  return {0, nn::bytes_of(in[1]) + 2 * nn::bytes_of(out[0])};
}

Cost embedding_grad_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out,
                         const Attrs&) {
  return {double(in[0].shape.numel()), nn::bytes_of(in) + nn::bytes_of(out)};
}

}  // namespace

const OpDef op_def_embedding = {
    .name = kEmbedding,
    .num_inputs = 2,
    .infer = embedding_infer,
    .kernel = embedding_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      Attrs a = EmbeddingGradAttrs{.num_rows = c.input_metas[0].shape[0]};
      return {call_one_output(OpKind::embedding_grad, {c.grad_outputs[0], c.inputs[1]}, a),
              Tensor()};
    },
    .saved_inputs = 0b10,
    .amp = AmpClass::follow,
    .f16_kernels = false,
    .cost = embedding_cost,
    .shard = &kEmbeddingShardRule,
};

const OpDef op_def_embedding_grad = {
    .name = kEmbeddingGrad,
    .attrs = attrs_kind<EmbeddingGradAttrs>,
    .num_inputs = 2,
    .infer = embedding_grad_infer,
    .kernel = embedding_grad_kernel,
    // Linear in grad: its own gradient is the lookup again.
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {embedding(c.grad_outputs[0], c.inputs[1]), Tensor()};
    },
    .saved_inputs = 0b10,
    .amp = AmpClass::follow,
    .f16_kernels = false,
    .cost = embedding_grad_cost,
    .no_shard_reason =
        "a backward op: the partition splits the forward graph and graph autodiff differentiates "
        "each rank's local graph",
};

Tensor embedding(const Tensor& table, const Tensor& indices) {
  return call_one_output(OpKind::embedding, {table, indices});
}

}  // namespace kiln::ops
