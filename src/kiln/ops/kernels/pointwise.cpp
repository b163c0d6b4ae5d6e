#include "kiln/ops/kernels/pointwise.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "kiln/core/error.h"

namespace kiln::ops {
namespace {

constexpr int kMaxInputs = 8;

// One operand seen in the output's iteration order, after coalescing.
struct Operand {
  const char* base = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> strides;  // in elements, per iteration dim (0 = broadcast)
};

void load_tile(const Operand& op, int64_t offset, int64_t inner_stride, int64_t n, float* scratch,
               const float** ptr) {
  size_t es = dtype_size(op.dtype);
  const char* p = op.base + offset * int64_t(es);
  if (inner_stride == 1 && op.dtype == DType::f32) {
    *ptr = reinterpret_cast<const float*>(p);
    return;
  }
  if (inner_stride == 0) {
    float v;
    convert(p, op.dtype, &v, DType::f32, 1);
    std::fill(scratch, scratch + n, v);
  } else if (inner_stride == 1) {
    convert(p, op.dtype, scratch, DType::f32, n);
  } else if (op.dtype == DType::bf16) {
    // Strided bf16 (AMP's common case): widen inline instead of a dispatched call per element.
    const auto* b = reinterpret_cast<const bf16_t*>(p);
    for (int64_t i = 0; i < n; ++i) scratch[i] = bf16_to_float(b[i * inner_stride]);
  } else if (op.dtype == DType::f32) {
    const auto* f = reinterpret_cast<const float*>(p);
    for (int64_t i = 0; i < n; ++i) scratch[i] = f[i * inner_stride];
  } else {
    for (int64_t i = 0; i < n; ++i) {
      convert(p + i * inner_stride * int64_t(es), op.dtype, scratch + i, DType::f32, 1);
    }
  }
  *ptr = scratch;
}

}  // namespace

void pointwise_apply(std::span<const Tensor> inputs, Tensor& out, TileBody body) {
  const int nin = int(inputs.size());
  if (nin > kMaxInputs) throw Error("pointwise: more than 8 inputs");
  const int64_t numel = out.numel();
  if (numel == 0) return;
  const int rank = out.rank();

  // Iterate in the output's memory order: dims sorted by output stride, largest first.
  std::vector<int> order(static_cast<size_t>(rank));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return out.strides()[size_t(a)] > out.strides()[size_t(b)];
  });

  // Per operand (output last) strides in that order; broadcast dims get stride 0.
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides(size_t(nin) + 1);
  for (int d : order) sizes.push_back(out.shape()[d]);
  for (int k = 0; k <= nin; ++k) {
    const Tensor& t = k < nin ? inputs[size_t(k)] : out;
    int shift = rank - t.rank();
    for (int d : order) {
      int td = d - shift;
      int64_t s = (td < 0 || t.shape()[td] == 1) ? 0 : t.strides()[size_t(td)];
      strides[size_t(k)].push_back(s);
    }
  }
  // Drop size-1 dims, then merge neighbours that every operand walks contiguously.
  std::vector<int64_t> csizes;
  std::vector<std::vector<int64_t>> cstrides(size_t(nin) + 1);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 1) continue;
    bool merge = !csizes.empty();
    for (int k = 0; merge && k <= nin; ++k) {
      merge = cstrides[size_t(k)].back() == strides[size_t(k)][i] * sizes[i];
    }
    if (merge) {
      csizes.back() *= sizes[i];
      for (int k = 0; k <= nin; ++k) cstrides[size_t(k)].back() = strides[size_t(k)][i];
    } else {
      csizes.push_back(sizes[i]);
      for (int k = 0; k <= nin; ++k) cstrides[size_t(k)].push_back(strides[size_t(k)][i]);
    }
  }
  if (csizes.empty()) {
    csizes.push_back(1);
    for (int k = 0; k <= nin; ++k) cstrides[size_t(k)].push_back(0);
  }

  const int crank = int(csizes.size());
  const int64_t inner = csizes.back();
  const int64_t tiles_per_row = (inner + kTile - 1) / kTile;
  const int64_t rows = numel / inner;
  const int64_t work = rows * tiles_per_row;

  Operand ops[kMaxInputs + 1];
  for (int k = 0; k <= nin; ++k) {
    const Tensor& t = k < nin ? inputs[size_t(k)] : out;
    ops[k].base = static_cast<const char*>(t.raw_data());
    ops[k].dtype = t.dtype();
    ops[k].strides = cstrides[size_t(k)];
  }
  const bool out_f32_flat = out.dtype() == DType::f32 && cstrides[size_t(nin)].back() == 1;
  const size_t out_es = dtype_size(out.dtype());

#pragma omp parallel if (numel > 32768)
  {
    alignas(64) float scratch[kMaxInputs + 1][kTile];
    const float* ptrs[kMaxInputs];
#pragma omp for schedule(static)
    for (int64_t w = 0; w < work; ++w) {
      int64_t row = w / tiles_per_row;
      int64_t start = (w % tiles_per_row) * kTile;
      int64_t n = std::min(kTile, inner - start);
      // Offsets of this row for every operand.
      int64_t offs[kMaxInputs + 1] = {};
      int64_t rem = row;
      for (int d = crank - 2; d >= 0; --d) {
        int64_t idx = rem % csizes[size_t(d)];
        rem /= csizes[size_t(d)];
        for (int k = 0; k <= nin; ++k) offs[k] += idx * ops[k].strides[size_t(d)];
      }
      for (int k = 0; k < nin; ++k) {
        int64_t is = ops[k].strides.back();
        load_tile(ops[k], offs[k] + start * is, is, n, scratch[k], &ptrs[k]);
      }
      int64_t os = ops[nin].strides.back();
      char* obase = const_cast<char*>(ops[nin].base) + (offs[nin] + start * os) * int64_t(out_es);
      if (out_f32_flat) {
        body.fn(body.ctx, reinterpret_cast<float*>(obase), ptrs, n);
      } else {
        body.fn(body.ctx, scratch[nin], ptrs, n);
        if (os == 1) {
          convert(scratch[nin], DType::f32, obase, out.dtype(), n);
        } else if (out.dtype() == DType::bf16) {
          auto* b = reinterpret_cast<bf16_t*>(obase);
          for (int64_t i = 0; i < n; ++i) b[i * os] = float_to_bf16(scratch[nin][i]);
        } else {
          for (int64_t i = 0; i < n; ++i) {
            convert(scratch[nin] + i, DType::f32, obase + i * os * int64_t(out_es), out.dtype(), 1);
          }
        }
      }
    }
  }
}

void pointwise_kernel(OpKind kind, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                      const Attrs& attrs) {
  struct Ctx {
    TileFn tile;
    const Attrs* attrs;
  } ctx{op_def(kind).tile, &attrs};
  TileBody body{[](const void* c, float* out, const float* const* in, int64_t n) {
                  auto* x = static_cast<const Ctx*>(c);
                  x->tile(out, in, n, *x->attrs);
                },
                &ctx};
  pointwise_apply(inputs, outputs[0], body);
}

std::vector<TensorMeta> infer_pointwise(std::string_view op, std::span<const TensorMeta> inputs) {
  Shape shape = inputs[0].shape;
  DType dtype = inputs[0].dtype;
  std::string name(op);
  for (size_t i = 1; i < inputs.size(); ++i) {
    shape = broadcast_shapes(shape, inputs[i].shape, name.c_str());
    if (inputs[i].dtype != dtype) {
      throw ShapeError(name + ": dtypes " + std::string(dtype_name(dtype)) + " and " +
                       std::string(dtype_name(inputs[i].dtype)) + " differ (cast one first)");
    }
  }
  Layout layout = Layout::contiguous;
  for (const TensorMeta& m : inputs) {
    if (m.layout == Layout::channels_last && m.shape == shape) layout = Layout::channels_last;
  }
  return {TensorMeta{shape, dtype, layout}};
}

}  // namespace kiln::ops
