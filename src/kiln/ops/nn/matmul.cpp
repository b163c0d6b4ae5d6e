// Matrix product over the last two dims, batched over broadcast leading dims, on oneDNN.
// transpose_a/transpose_b are expressed as strides, so neither the forward nor the gradients
// (which use the transposed forms) ever copy an operand.
#include "kiln/ops/detail/nn_common.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using namespace dnnl_util;
using nn::throw_shape_error;

constexpr char kMatmul[] = "matmul";

struct MatmulDims {
  Shape batch;  // broadcast leading dims
  int64_t m, k, n;
};

MatmulDims matmul_dims(std::span<const TensorMeta> in, const MatmulAttrs& attrs) {
  const TensorMeta &a = in[0], &b = in[1];
  if (a.shape.rank() < 2 || b.shape.rank() < 2) {
    throw_shape_error(kMatmul, "both operands need rank >= 2", in);
  }
  nn::check_float(kMatmul, a, "a", true, in);
  if (b.dtype != a.dtype) throw_shape_error(kMatmul, "operand dtypes differ", in);
  int ra = a.shape.rank(), rb = b.shape.rank();
  int64_t m = attrs.transpose_a ? a.shape[ra - 1] : a.shape[ra - 2];
  int64_t ka = attrs.transpose_a ? a.shape[ra - 2] : a.shape[ra - 1];
  int64_t kb = attrs.transpose_b ? b.shape[rb - 1] : b.shape[rb - 2];
  int64_t n = attrs.transpose_b ? b.shape[rb - 2] : b.shape[rb - 1];
  if (ka != kb) {
    throw_shape_error(kMatmul,
                      detail::concat("inner dimensions differ (", ka, " vs ", kb, "; transpose_a=",
                                     attrs.transpose_a, ", transpose_b=", attrs.transpose_b, ")"),
                      in);
  }
  Shape ba(std::vector<int64_t>(a.shape.begin(), a.shape.end() - 2));
  Shape bb(std::vector<int64_t>(b.shape.begin(), b.shape.end() - 2));
  Shape batch;
  try {
    batch = broadcast_shapes(ba, bb, kMatmul);
  } catch (const ShapeError&) {
    throw_shape_error(
        kMatmul, "batch dimensions " + ba.str() + " and " + bb.str() + " do not broadcast", in);
  }
  return {batch, m, ka, n};
}

std::vector<TensorMeta> matmul_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  MatmulDims d = matmul_dims(in, attrs.as<MatmulAttrs>());
  std::vector<int64_t> out = d.batch.dims();
  out.push_back(d.m);
  out.push_back(d.n);
  return {{Shape(std::move(out)), in[0].dtype, Layout::contiguous}};
}

// The logical [batch..., rows, cols] shape and strides oneDNN sees for an operand of rank r
// padded to `rank`, transposed through its strides when asked. Strides of size-1 dims are made
// canonical (they are never used, but some oneDNN implementations reject odd ones).
void operand_view(const Tensor& t, bool transposed, int rank, Shape& shape, Strides& strides) {
  int r = t.rank();
  std::vector<int64_t> dims(size_t(rank), 1), st(size_t(rank), 0);
  for (int i = 0; i < r; ++i) {
    dims[size_t(rank - r + i)] = t.shape()[i];
    st[size_t(rank - r + i)] = t.strides()[size_t(i)];
  }
  if (transposed) {
    std::swap(dims[size_t(rank - 1)], dims[size_t(rank - 2)]);
    std::swap(st[size_t(rank - 1)], st[size_t(rank - 2)]);
  }
  // Canonical strides for size-1 dims: as if contiguous from the next non-unit dim outward.
  int64_t acc = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (dims[size_t(i)] == 1) st[size_t(i)] = acc;
    acc = std::max(acc, st[size_t(i)] * dims[size_t(i)]);
  }
  shape = Shape(std::move(dims));
  strides = std::move(st);
}

// Row-major, or row-major with the last two dims swapped (a transpose view): the layouts
// oneDNN's optimized matmul reads in place. Anything else is copied to row-major first.
bool matmul_ready(const Tensor& t) {
  if (t.is_contiguous()) return true;
  int r = t.rank();
  std::vector<int64_t> dims = t.shape().dims();
  std::swap(dims[size_t(r - 1)], dims[size_t(r - 2)]);
  Strides st = contiguous_strides(Shape(dims));
  std::swap(st[size_t(r - 1)], st[size_t(r - 2)]);
  for (int i = 0; i < r; ++i) {
    if (t.shape()[i] != 1 && t.strides()[size_t(i)] != st[size_t(i)]) return false;
  }
  return true;
}

void matmul_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a_) {
  const MatmulAttrs& attrs = a_.as<MatmulAttrs>();
  Tensor a = matmul_ready(in[0]) ? in[0] : in[0].contiguous();
  Tensor b = matmul_ready(in[1]) ? in[1] : in[1].contiguous();
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  int rank = y.rank();
  int64_t k = attrs.transpose_a ? a.shape()[a.rank() - 2] : a.shape()[a.rank() - 1];
  if (k == 0) {
    std::memset(y.raw_data(), 0, y.nbytes());
    return;
  }
  Shape sa, sb;
  Strides ta, tb;
  operand_view(a, attrs.transpose_a, rank, sa, ta);
  operand_view(b, attrs.transpose_b, rank, sb, tb);
  PrimitiveKey key;
  key.add(1).add(sa, ta, a.dtype()).add(sb, tb, b.dtype());
  thread_local PrimitiveCache<PrimitiveRunner> cache;
  PrimitiveRunner& r = cache.get(key, [&] {
    return matmul_runner(desc_of(sa, ta, a.dtype(), kMatmul), desc_of(sb, tb, b.dtype(), kMatmul),
                         desc_of(y, kMatmul));
  });
  r.set(DNNL_ARG_SRC, a.raw_data());
  r.set(DNNL_ARG_WEIGHTS, b.raw_data());
  r.set(DNNL_ARG_DST, y.raw_data());
  r.run();
}

std::vector<Tensor> matmul_grad(const GradCtx& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &g = c.grad_outputs[0];
  const MatmulAttrs& ma = c.attrs.as<MatmulAttrs>();
  bool ta = ma.transpose_a, tb = ma.transpose_b;
  std::vector<Tensor> grads(2);
  // With op(X) = X or Xᵀ: d op(A) = g·op(B)ᵀ and d op(B) = op(A)ᵀ·g; transposing back to the
  // stored orientation only flips which operand goes first and the transpose flags.
  if (c.needs_grad[0]) {
    Tensor ga = !ta ? matmul(g, b, false, !tb) : matmul(b, g, tb, true);
    grads[0] = nn::reduce_to(ga, c.input_metas[0].shape);
  }
  if (c.needs_grad[1] && !ta && a.rank() > 2 && c.input_metas[1].shape.rank() == 2) {
    // A 2-D weight applied to batched rows (a Dense layer on [B, T, C]): every leading dim is
    // more rows of one product, so fold them into one [rows, K] matmul instead of B products
    // of [K, N] summed afterwards (B times the memory, and a reduction).
    const int64_t k = a.dim(-1);
    Tensor a2 = reshape(a, {-1, k}), g2 = reshape(g, {-1, g.dim(-1)});
    grads[1] = !tb ? matmul(a2, g2, true, false) : matmul(g2, a2, true, false);
  } else if (c.needs_grad[1]) {
    Tensor gb = !tb ? matmul(a, g, !ta, false) : matmul(g, a, true, ta);
    grads[1] = nn::reduce_to(gb, c.input_metas[1].shape);
  }
  return grads;
}

Cost matmul_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out,
                 const Attrs& attrs) {
  MatmulDims d = matmul_dims(in, attrs.as<MatmulAttrs>());
  double flops = 2.0 * double(d.batch.numel()) * double(d.m) * double(d.n) * double(d.k);
  return {flops, nn::bytes_of(in) + nn::bytes_of(out)};
}

}  // namespace

const OpDef op_def_matmul = {
    .name = kMatmul,
    .attrs = attrs_kind<MatmulAttrs>,
    .num_inputs = 2,
    .infer = matmul_infer,
    .kernel = matmul_kernel,
    .grad = matmul_grad,
    .saved_inputs = 0b11,
    .amp = AmpClass::low_precision,
    .f16_kernels = false,
    .cost = matmul_cost,
    .shard = &kMatmulShardRule,
};

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  return call_one_output(OpKind::matmul, {a, b},
                         MatmulAttrs{.transpose_a = transpose_a, .transpose_b = transpose_b});
}

}  // namespace kiln::ops
