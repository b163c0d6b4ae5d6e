#include "kiln/ops/kernels/reduce.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/core/isa_variant.h"
#include "kiln/ops/kernels/copy.h"

// v16 values pass only between this file's own inline functions, so GCC's note that their ABI
// differs without AVX-512 does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

KILN_ISA_TARGET_BEGIN
namespace kiln::ops::KILN_ISA {
namespace {

// Below this many input elements a reduction runs on one thread.
constexpr int64_t kParallelElements = 32768;
// Columns reduced together: the accumulators (2 × 4 KiB) stay in L1.
constexpr int64_t kChunk = 1024;
// Rows summed into a partial before it is added to the total: bounds float rounding growth to
// O(kRowBlock + R/kRowBlock) instead of O(R) for long reductions.
constexpr int64_t kRowBlock = 256;

// GCC/Clang vector extension: the width matches AVX-512 and the compiler lowers it for narrower
// targets, so the accumulators stay in registers without target-specific intrinsics.
typedef float v16 __attribute__((vector_size(64)));

inline v16 load16(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float max_nan(float acc, float v) {
  return (v > acc || v != v) ? v : acc;
}
inline v16 max_nan(v16 acc, v16 v) {
  return (v > acc || v != v) ? v : acc;
}

float row_sum(const float* p, int64_t n) {
  double total = 0;
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    const float* q = p + b;
    int64_t i = 0;
    float s = 0;
    if (m >= 64) {
      v16 a0 = {}, a1 = {}, a2 = {}, a3 = {};
      for (; i + 64 <= m; i += 64) {
        a0 += load16(q + i);
        a1 += load16(q + i + 16);
        a2 += load16(q + i + 32);
        a3 += load16(q + i + 48);
      }
      v16 a = (a0 + a1) + (a2 + a3);
      for (; i + 16 <= m; i += 16) a += load16(q + i);
      for (int k = 0; k < 16; ++k) s += a[k];
    }
    for (; i < m; ++i) s += q[i];
    total += s;
  }
  return float(total);
}

float row_max(const float* p, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  if (n >= 64) {
    v16 a0 = load16(p), a1 = load16(p + 16), a2 = load16(p + 32), a3 = load16(p + 48);
    for (i = 64; i + 64 <= n; i += 64) {
      a0 = max_nan(a0, load16(p + i));
      a1 = max_nan(a1, load16(p + i + 16));
      a2 = max_nan(a2, load16(p + i + 32));
      a3 = max_nan(a3, load16(p + i + 48));
    }
    v16 a = max_nan(max_nan(a0, a1), max_nan(a2, a3));
    for (int k = 0; k < 16; ++k) m = max_nan(m, a[k]);
  }
  for (; i < n; ++i) m = max_nan(m, p[i]);
  return m;
}

inline float row_reduce(ReduceKind kind, const float* p, int64_t n) {
  return kind == ReduceKind::sum ? row_sum(p, n) : row_max(p, n);
}

// out[j] = reduce_r x[r * stride + j] for j < w ≤ kChunk.
void columns(ReduceKind kind, const float* x, int64_t rows, int64_t stride, int64_t w, float* out) {
  if (kind == ReduceKind::max) {
    std::memcpy(out, x, size_t(w) * sizeof(float));
    for (int64_t r = 1; r < rows; ++r) {
      const float* a = x + r * stride;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) out[j] = max_nan(out[j], a[j]);
    }
    return;
  }
  alignas(64) float part[kChunk];
  const bool blocked = rows > kRowBlock;
  if (blocked) std::fill(out, out + w, 0.0f);
  for (int64_t rb = 0; rb < rows; rb += kRowBlock) {
    const int64_t re = std::min(rows, rb + kRowBlock);
    float* acc = blocked ? part : out;
    std::memcpy(acc, x + rb * stride, size_t(w) * sizeof(float));
    int64_t r = rb + 1;
    for (; r + 4 <= re; r += 4) {
      const float *a = x + r * stride, *b = a + stride, *c = b + stride, *d = c + stride;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) acc[j] += (a[j] + b[j]) + (c[j] + d[j]);
    }
    for (; r < re; ++r) {
      const float* a = x + r * stride;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) acc[j] += a[j];
    }
    if (blocked) {
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) out[j] += part[j];
    }
  }
}

inline void combine(ReduceKind kind, float* acc, const float* v, int64_t n) {
  if (kind == ReduceKind::sum) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) acc[j] += v[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) acc[j] = max_nan(acc[j], v[j]);
  }
}

// Reduces the rows of one [rows, inner] block, columns [j0, j1), into out[j0, j1).
void column_block(ReduceKind kind, const float* x, int64_t rows, int64_t inner, int64_t j0,
                  int64_t j1, float* out) {
  // Narrow rows waste vector lanes: view k consecutive rows as one row of k·inner columns,
  // reduce those, then fold the k groups together.
  if (inner < 64 && j0 == 0 && j1 == inner) {
    const int64_t k = (64 + inner - 1) / inner;
    const int64_t wide_rows = rows / k;
    if (wide_rows >= 2) {
      alignas(64) float acc[128];
      const int64_t w = k * inner;
      columns(kind, x, wide_rows, w, w, acc);
      std::memcpy(out, acc, size_t(inner) * sizeof(float));
      for (int64_t g = 1; g < k; ++g) combine(kind, out, acc + g * inner, inner);
      for (int64_t r = wide_rows * k; r < rows; ++r) combine(kind, out, x + r * inner, inner);
      return;
    }
  }
  for (int64_t c = j0; c < j1; c += kChunk) {
    columns(kind, x + c, rows, inner, std::min(kChunk, j1 - c), out + c);
  }
}

}  // namespace

void reduce_f32(ReduceKind kind, const float* x, int64_t outer, int64_t reduced, int64_t inner,
                float* out, bool use_threads) {
  if (outer == 0 || inner == 0) return;
  if (reduced == 0) {
    std::fill(out, out + outer * inner,
              kind == ReduceKind::sum ? 0.0f : -std::numeric_limits<float>::infinity());
    return;
  }
  const int64_t total = outer * reduced * inner;
  const int threads = omp_get_max_threads();
  const bool parallel = use_threads && total > kParallelElements && threads > 1;

  if (inner == 1) {
    if (!parallel || outer >= threads) {
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t o = 0; o < outer; ++o) out[o] = row_reduce(kind, x + o * reduced, reduced);
      return;
    }
    // Few long rows: every thread takes a slice of each row.
    for (int64_t o = 0; o < outer; ++o) {
      const float* row = x + o * reduced;
      std::vector<float> partial(size_t(threads), 0.0f);
      int used = 1;
#pragma omp parallel num_threads(threads)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t per = (reduced + nt - 1) / nt;
        const int64_t b = std::min(reduced, t * per), e = std::min(reduced, b + per);
        partial[size_t(t)] =
            e > b ? row_reduce(kind, row + b, e - b) : (kind == ReduceKind::sum ? 0.0f : row[0]);
        if (t == 0) used = nt;
      }
      float acc = partial[0];
      for (int t = 1; t < used; ++t) combine(kind, &acc, &partial[size_t(t)], 1);
      out[o] = acc;
    }
    return;
  }

  const int64_t chunks = inner < 64 ? 1 : (inner + kChunk - 1) / kChunk;
  const int64_t units = outer * chunks;
  if (!parallel || units >= threads) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t o = u / chunks, c = u % chunks;
      const int64_t j0 = chunks == 1 ? 0 : c * kChunk;
      const int64_t j1 = chunks == 1 ? inner : std::min(inner, j0 + kChunk);
      column_block(kind, x + o * reduced * inner, reduced, inner, j0, j1, out + o * inner);
    }
    return;
  }
  // Few output columns (a bias gradient: outer = 1, inner = channels): split the reduced rows
  // among threads, each into its own partial, then combine.
  const int64_t out_n = outer * inner;
  std::vector<float> partials(size_t(threads) * size_t(out_n));
  int used = 1;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t per = (reduced + nt - 1) / nt;
    const int64_t b = std::min(reduced, t * per), e = std::min(reduced, b + per);
    float* mine = partials.data() + size_t(t) * size_t(out_n);
    for (int64_t o = 0; o < outer; ++o) {
      if (e > b) {
        column_block(kind, x + (o * reduced + b) * inner, e - b, inner, 0, inner, mine + o * inner);
      } else {
        // An empty slice contributes the identity: zeros, or a copy of a real row for max.
        const float* first = x + o * reduced * inner;
        for (int64_t j = 0; j < inner; ++j) {
          mine[o * inner + j] = kind == ReduceKind::sum ? 0.0f : first[j];
        }
      }
    }
    if (t == 0) used = nt;
  }
  std::memcpy(out, partials.data(), size_t(out_n) * sizeof(float));
  for (int t = 1; t < used; ++t) combine(kind, out, partials.data() + size_t(t) * out_n, out_n);
}

void reduce_tensor(ReduceKind kind, const Tensor& x, const std::vector<bool>& reduce, double scale,
                   Tensor& out) {
  const int64_t out_n = out.numel();
  Tensor result = out.dtype() == DType::f32 ? out : Tensor::empty(out.shape(), DType::f32);
  float* dst = result.data<float>();
  if (x.numel() == 0) {
    float v =
        kind == ReduceKind::sum ? float(0.0 * scale) : std::numeric_limits<float>::quiet_NaN();
    std::fill(dst, dst + out_n, v);
    if (!result.same(out)) convert(dst, DType::f32, out.raw_data(), out.dtype(), out_n);
    return;
  }
  Tensor xf = dense_f32(x);

  // The dims that matter (size > 1) in memory order; kept dims must also be in logical order
  // there, so that the row-major output matches the order the passes produce.
  struct Dim {
    int64_t size, stride;
    bool reduce;
  };
  auto memory_order = [&](const Tensor& t) {
    std::vector<std::pair<int, Dim>> dims;
    for (int i = 0; i < t.rank(); ++i) {
      if (t.shape()[i] != 1)
        dims.push_back({i, {t.shape()[i], t.strides()[size_t(i)], reduce[size_t(i)]}});
    }
    std::stable_sort(dims.begin(), dims.end(), [](const auto& a, const auto& b) {
      return a.second.stride > b.second.stride;
    });
    return dims;
  };
  auto dims = memory_order(xf);
  int last_kept = -1;
  bool in_order = true;
  for (const auto& [axis, d] : dims) {
    if (d.reduce) continue;
    in_order = in_order && axis > last_kept;
    last_kept = axis;
  }
  if (!in_order) {
    xf = contiguous_copy(xf);
    dims = memory_order(xf);
  }
  // Dense memory: neighbours with the same flag merge into one block.
  std::vector<std::pair<int64_t, bool>> blocks;
  for (const auto& [axis, d] : dims) {
    if (!blocks.empty() && blocks.back().second == d.reduce) {
      blocks.back().first *= d.size;
    } else {
      blocks.push_back({d.size, d.reduce});
    }
  }

  // Innermost reduced block first; each pass shrinks the data for the next.
  const float* src = xf.data<float>();
  Tensor temp;
  bool reduced_any = false;
  for (;;) {
    int i = int(blocks.size()) - 1;
    while (i >= 0 && !blocks[size_t(i)].second) --i;
    if (i < 0) break;
    int64_t outer = 1, inner = 1;
    bool more = false;
    for (int k = 0; k < i; ++k) {
      outer *= blocks[size_t(k)].first;
      more = more || blocks[size_t(k)].second;
    }
    for (size_t k = size_t(i) + 1; k < blocks.size(); ++k) inner *= blocks[k].first;
    float* pass_out = dst;
    Tensor next;
    if (more) {
      next = Tensor::empty({outer * inner}, DType::f32);
      pass_out = next.data<float>();
    }
    reduce_f32(kind, src, outer, blocks[size_t(i)].first, inner, pass_out);
    temp = next;
    src = pass_out;
    blocks.erase(blocks.begin() + i);
    reduced_any = true;
  }
  if (!reduced_any) std::memcpy(dst, src, size_t(out_n) * sizeof(float));
  if (scale != 1.0) {
    const float s = float(scale);
#pragma omp parallel for simd schedule(static) if (out_n > 65536)
    for (int64_t j = 0; j < out_n; ++j) dst[j] *= s;
  }
  if (!result.same(out)) convert(dst, DType::f32, out.raw_data(), out.dtype(), out_n);
}

void argmax_tensor(const Tensor& x, int axis, Tensor& out) {
  Tensor xc = contiguous_copy(x);
  if (xc.dtype() != DType::f32) {
    Tensor f = Tensor::empty(xc.shape(), DType::f32);
    convert(xc.raw_data(), xc.dtype(), f.raw_data(), DType::f32, xc.numel());
    xc = f;
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[d];
  const int64_t reduced = x.shape()[axis];
  const float* p = xc.data<float>();
  int64_t* idx = out.data<int64_t>();
  const bool parallel = x.numel() > kParallelElements;
  if (inner == 1) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t o = 0; o < outer; ++o) {
      const float* row = p + o * reduced;
      const float m = row_max(row, reduced);
      int64_t found = 0;
      for (int64_t r = 0; r < reduced; ++r) {
        if (row[r] == m || (m != m && row[r] != row[r])) {
          found = r;
          break;
        }
      }
      idx[o] = found;
    }
    return;
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t o = 0; o < outer; ++o) {
    const float* block = p + o * reduced * inner;
    int64_t* oi = idx + o * inner;
    for (int64_t c = 0; c < inner; c += kChunk) {
      const int64_t w = std::min(kChunk, inner - c);
      alignas(64) float best[kChunk];
      std::memcpy(best, block + c, size_t(w) * sizeof(float));
      std::fill(oi + c, oi + c + w, int64_t(0));
      for (int64_t r = 1; r < reduced; ++r) {
        const float* a = block + r * inner + c;
        int64_t* bi = oi + c;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) {
          const bool take = a[j] > best[j] || (a[j] != a[j] && best[j] == best[j]);
          best[j] = take ? a[j] : best[j];
          bi[j] = take ? r : bi[j];
        }
      }
    }
  }
}

}  // namespace kiln::ops::KILN_ISA
KILN_ISA_TARGET_END

#if KILN_ISA_DISPATCH
namespace kiln::ops {

KILN_ISA_DECLARE(void reduce_f32(ReduceKind kind, const float* x, int64_t outer, int64_t reduced,
                                 int64_t inner, float* out, bool use_threads))
KILN_ISA_DECLARE(void reduce_tensor(ReduceKind kind, const Tensor& x,
                                    const std::vector<bool>& reduce, double scale, Tensor& out))
KILN_ISA_DECLARE(void argmax_tensor(const Tensor& x, int axis, Tensor& out))

void reduce_f32(ReduceKind kind, const float* x, int64_t outer, int64_t reduced, int64_t inner,
                float* out, bool use_threads) {
  KILN_ISA_CALL(reduce_f32, kind, x, outer, reduced, inner, out, use_threads);
}
void reduce_tensor(ReduceKind kind, const Tensor& x, const std::vector<bool>& reduce, double scale,
                   Tensor& out) {
  KILN_ISA_CALL(reduce_tensor, kind, x, reduce, scale, out);
}
void argmax_tensor(const Tensor& x, int axis, Tensor& out) {
  KILN_ISA_CALL(argmax_tensor, x, axis, out);
}

}  // namespace kiln::ops
#endif
