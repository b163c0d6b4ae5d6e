#include "kiln/ops/detail/conv_col2im.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <exception>
#include <vector>

// GCC 12's AVX-512 intrinsics trip -W[maybe-]uninitialized on their undefined-register idiom.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include "kiln/core/error.h"
#include "kiln/core/isa_variant.h"
#include "kiln/ops/dnnl/context.h"
#include "kiln/ops/kernel_name.h"
#include "kiln/ops/kernels/conv_geometry.h"

// Why by hand: for few input channels, one matmul into an L2-sized column buffer per group of
// images, then a gather (not a scatter) of the columns into dx, beats oneDNN's backward-data.
// Measured: bench/README.md, section 'Kernel choices measured here'.

KILN_ISA_TARGET_BEGIN
namespace kiln::ops::KILN_ISA {

#if KILN_ISA_AVX512 || defined(__AVX2__)
namespace {
using namespace conv_geometry;

// AVX-512 gathers 16 lanes with mask registers; AVX2 (the baseline variant on CPUs without
// AVX-512, where oneDNN's backward-data runs LeNet's conv2 at ~40 GFLOP/s) 8 lanes, its masks
// vectors of all-ones lanes that an AND applies.
#if KILN_ISA_AVX512
constexpr int64_t kLanes = 16;
#else
constexpr int64_t kLanes = 8;
#endif
constexpr int64_t kMaxKernelHeight = 32;
constexpr int64_t kMaxImageColumnBytes = int64_t(1) << 20;
// Column buffer per work item: a group of images whose columns stay in L2.
constexpr int64_t kItemColumnBytes = int64_t(256) << 10;
// Loads per table row are unrolled by this many independent accumulators.
constexpr int64_t kUnroll = 4;

// Where it measured faster than oneDNN (bench/README.md): the GEMM needs O (its reduction) to be
// long enough to run near peak instead of streaming the column buffer, and oneDNN's kernel,
// vectorized over C, wastes fewer lanes as C grows.
bool faster_than_onednn(int64_t c, int64_t o) {
  return (c <= 4 && o >= 6) || (c <= 8 && o >= 16);
}

struct Geometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow, ph, pw;
  int64_t run() const { return kw * c; }                 // floats one pixel adds to one dx row
  int64_t kc() const { return kh * kw * c; }             // GEMM columns used
  int64_t kp() const { return round_up(kc(), kLanes); }  // GEMM columns computed
  int64_t row_len() const { return w * c; }              // one dx row, flat (iw, c)
  int64_t chunks() const { return (row_len() + kLanes - 1) / kLanes; }
  int64_t pixels() const { return oh * ow; }  // GEMM rows per image
};

// Where chunk j of a dx row finds its values in one kh row of columns (kh's runs of the
// pixels of one output row): the runs overlapping the chunk are those of consecutive pixels ow,
// and the run of pixel ow, shifted so that its position d + l lands on dx lane l, starts at
// ow*Kp + d with d = 16j - (ow - pad_w)*C: a fixed stride Kp - C from one pixel to the next.
// So a chunk needs its first offset, how many pixels' runs overlap it, and one mask per pixel
// (the lanes inside the run); mask rows are padded to a multiple of kUnroll with empty masks.
struct GatherTable {
  std::vector<int64_t> first;
  std::vector<int64_t> count;
#if KILN_ISA_AVX512
  std::vector<__mmask16> masks;
#else
  std::vector<int32_t> masks;  // kLanes per entry: -1 in the lanes of the run, else 0
#endif
  int64_t per_chunk = 0;

  void set_mask(int64_t entry, uint32_t lanes) {
#if KILN_ISA_AVX512
    masks[size_t(entry)] = __mmask16(lanes);
#else
    for (int64_t l = 0; l < kLanes; ++l)
      masks[size_t(entry * kLanes + l)] = (lanes >> l) & 1u ? -1 : 0;
#endif
  }
};

void build_table(const Geometry& g, GatherTable& t) {
  const int64_t chunks = g.chunks(), run = g.run();
  // Runs overlapping one chunk: at most (kLanes + run - 2) / C + 1 pixels.
  t.per_chunk = round_up((kLanes + run - 2) / g.c + 1, kUnroll);
  t.first.assign(size_t(chunks), 0);
  t.count.assign(size_t(chunks), 0);
  t.masks.assign(size_t(chunks * t.per_chunk * (KILN_ISA_AVX512 ? 1 : kLanes)), 0);
  for (int64_t j = 0; j < chunks; ++j) {
    int64_t e = j * t.per_chunk;
    bool found = false;
    const int64_t valid = std::min(kLanes, g.row_len() - j * kLanes);
    for (int64_t ow = 0; ow < g.ow; ++ow) {
      const int64_t d = j * kLanes - (ow - g.pw) * g.c;  // lane l reads run position d + l
      const int64_t lo = std::max<int64_t>(0, -d), hi = std::min(valid, run - d);
      if (hi <= lo) {
        if (found) break;
        continue;
      }
      if (!found) t.first[size_t(j)] = ow * g.kp() + d;
      found = true;
      t.set_mask(e++, ((1u << hi) - 1u) & ~((1u << lo) - 1u));
    }
    t.count[size_t(j)] = e - j * t.per_chunk;
  }
}

// Floats a column buffer needs past its end: a chunk's loads run in groups of kUnroll pixels,
// so up to kUnroll - 1 pixels past the last run that overlaps it, and a load reads up to
// kLanes - 1 floats past a run.
int64_t guard_after(const Geometry& g) {
  return kUnroll * g.kp() + kLanes;
}

// The column rows that add into dx row ih (one per kernel row whose output row exists), into
// `rows`; returns how many.
int column_rows(const Geometry& g, const float* col, int64_t ih, const float** rows) {
  int nrows = 0;
  for (int64_t kh = 0; kh < g.kh; ++kh) {
    const int64_t oh = ih + g.ph - kh;
    if (oh >= 0 && oh < g.oh) rows[nrows++] = col + oh * g.ow * g.kp() + kh * g.run();
  }
  return nrows;
}

#if KILN_ISA_AVX512
// dx for one image from its column rows (`col`: pixels() rows of kp() floats).
void col2im_image(const Geometry& g, const GatherTable& t, const float* col, float* dx) {
  const int64_t chunks = g.chunks(), per = t.per_chunk, kp = g.kp(), step = kp - g.c;
  const __mmask16 tail = __mmask16((1u << (g.row_len() - (chunks - 1) * kLanes)) - 1u);
  const float* rows[kMaxKernelHeight];
  for (int64_t ih = 0; ih < g.h; ++ih) {
    const int nrows = column_rows(g, col, ih, rows);
    float* out = dx + ih * g.row_len();
    for (int64_t j = 0; j < chunks; ++j) {
      const __mmask16* mask = t.masks.data() + j * per;
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int r = 0; r < nrows; ++r) {
        // Masked adds of plain loads: cheaper here than masked loads (0.047 vs 0.056 ms for
        // LeNet's conv2); the lanes outside a run may read the buffer's guards.
        const float* p = rows[r] + t.first[size_t(j)];
        for (int64_t e = 0; e < t.count[size_t(j)]; e += kUnroll, p += kUnroll * step) {
          a0 = _mm512_mask_add_ps(a0, mask[e], a0, _mm512_loadu_ps(p));
          a1 = _mm512_mask_add_ps(a1, mask[e + 1], a1, _mm512_loadu_ps(p + step));
          a2 = _mm512_mask_add_ps(a2, mask[e + 2], a2, _mm512_loadu_ps(p + 2 * step));
          a3 = _mm512_mask_add_ps(a3, mask[e + 3], a3, _mm512_loadu_ps(p + 3 * step));
        }
      }
      __m512 sum = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
      _mm512_mask_storeu_ps(out + j * kLanes, j + 1 == chunks ? tail : __mmask16(0xFFFF), sum);
    }
  }
}
#else
// The same with 8 lanes: a masked-off lane adds the AND of its load with zero, +0.
void col2im_image(const Geometry& g, const GatherTable& t, const float* col, float* dx) {
  const int64_t chunks = g.chunks(), per = t.per_chunk, kp = g.kp(), step = kp - g.c;
  const int64_t tail = g.row_len() - (chunks - 1) * kLanes;
  const float* rows[kMaxKernelHeight];
  auto masked = [](const float* p, const int32_t* mask) {
    return _mm256_and_ps(
        _mm256_loadu_ps(p),
        _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(mask))));
  };
  for (int64_t ih = 0; ih < g.h; ++ih) {
    const int nrows = column_rows(g, col, ih, rows);
    float* out = dx + ih * g.row_len();
    for (int64_t j = 0; j < chunks; ++j) {
      const int32_t* mask = t.masks.data() + j * per * kLanes;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int r = 0; r < nrows; ++r) {
        const float* p = rows[r] + t.first[size_t(j)];
        for (int64_t e = 0; e < t.count[size_t(j)]; e += kUnroll, p += kUnroll * step) {
          a0 = _mm256_add_ps(a0, masked(p, mask + e * kLanes));
          a1 = _mm256_add_ps(a1, masked(p + step, mask + (e + 1) * kLanes));
          a2 = _mm256_add_ps(a2, masked(p + 2 * step, mask + (e + 2) * kLanes));
          a3 = _mm256_add_ps(a3, masked(p + 3 * step, mask + (e + 3) * kLanes));
        }
      }
      const __m256 sum = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
      if (j + 1 < chunks || tail == kLanes) {
        _mm256_storeu_ps(out + j * kLanes, sum);
      } else {  // a masked store is slow on AMD's cores
        alignas(32) float lanes[kLanes];
        _mm256_store_ps(lanes, sum);
        std::copy_n(lanes, tail, out + j * kLanes);
      }
    }
  }
}
#endif

// col[rows, Kp] = dy[rows, O] · Wt[O, Kp], all row-major; primitives cached per thread.
void run_gemm(const float* dy, const float* wt, float* col, int64_t rows, int64_t o, int64_t kp) {
  using namespace dnnl_util;
  PrimitiveKey key;
  key.add(rows).add(o).add(kp);
  thread_local PrimitiveCache<PrimitiveRunner> cache;
  PrimitiveRunner& r = cache.get(key, [&] {
    return matmul_runner(dnnl::memory::desc({rows, o}, dt::f32, tag::ab),
                         dnnl::memory::desc({o, kp}, dt::f32, tag::ab),
                         dnnl::memory::desc({rows, kp}, dt::f32, tag::ab));
  });
  r.set(DNNL_ARG_SRC, const_cast<float*>(dy));
  r.set(DNNL_ARG_WEIGHTS, const_cast<float*>(wt));
  r.set(DNNL_ARG_DST, col);
  r.run();
}

}  // namespace

bool can_run_gemm_backward_data(const Tensor& dy, const Shape& w_shape, const Shape& x_shape,
                                const ConvAttrs& a) {
  if (dy.dtype() != DType::f32 || dy.rank() != 4 || w_shape.rank() != 4 || x_shape.rank() != 4)
    return false;
  if (a.groups != 1) return false;
  for (int i = 0; i < 2; ++i) {
    if (a.stride[i] != 1 || a.dilation[i] != 1 || a.padding[i] < 0) return false;
  }
  const int64_t c = x_shape[1], o = w_shape[0], kh = w_shape[2], kw = w_shape[3];
  if (w_shape[1] != c || c < 1 || kh < 1 || kw < 1 || kh > kMaxKernelHeight) return false;
  if (!faster_than_onednn(c, o)) return false;
  const int64_t oh = x_shape[2] + 2 * a.padding[0] - kh + 1;
  const int64_t ow = x_shape[3] + 2 * a.padding[1] - kw + 1;
  if (x_shape.numel() == 0 || oh < 1 || ow < 1) return false;
  if (dy.shape() != Shape{x_shape[0], o, oh, ow}) return false;
  const int64_t image_column_bytes = oh * ow * round_up(kh * kw * c, kLanes) * 4;
  if (image_column_bytes > kMaxImageColumnBytes) return false;
  return is_dense_channels_last(dy);
}

void gemm_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  const char* op = "gemm_backward_data";
  note_kernel("kiln:col2im");
  if (dy.rank() != 4 || w.rank() != 4 || dx.rank() != 4 || dy.dtype() != DType::f32 ||
      w.dtype() != DType::f32 || dx.dtype() != DType::f32 || w.dim(1) != dx.dim(1) ||
      dy.dim(0) != dx.dim(0) || dy.dim(1) != w.dim(0)) {
    throw ShapeError(detail::concat(op, ": expects f32 dy [N, O, OH, OW], w [O, C, KH, KW], ",
                                    "dx [N, C, H, W]; got dy ", describe(dy), ", w ", describe(w),
                                    ", dx ", describe(dx)));
  }
  if (!is_dense_channels_last(dy) || !is_dense_channels_last(dx) || !w.is_contiguous() ||
      w.dim(2) > kMaxKernelHeight) {
    throw Error(detail::concat(op, ": needs channels-last dense dy ", describe(dy), " and dx ",
                               describe(dx), ", contiguous w ", describe(w),
                               " with KH <= ", kMaxKernelHeight));
  }
  Geometry g{dx.dim(0), dx.dim(1), dx.dim(2), dx.dim(3), w.dim(0), w.dim(2),
             w.dim(3),  dy.dim(2), dy.dim(3), 0,         0};
  g.ph = implied_padding("gemm_backward_data", g.h, g.kh, g.oh, "height");
  g.pw = implied_padding("gemm_backward_data", g.w, g.kw, g.ow, "width");
  if (dx.numel() == 0) return;
  const int64_t kp = g.kp();

  // Wt [O, Kp]: Wt[o, (kh*KW + kw)*C + c] = w[o, c, kh, kw]; pad columns zero.
  Tensor wt_buffer = Tensor::empty(Shape{g.o, kp});
  float* wt = wt_buffer.data<float>();
  const float* wd = w.data<float>();
  for (int64_t o = 0; o < g.o; ++o) {
    float* row = wt + o * kp;
    std::fill(row + g.kc(), row + kp, 0.0f);
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t k = 0; k < g.kh * g.kw; ++k)
        row[k * g.c + c] = wd[(o * g.c + c) * g.kh * g.kw + k];
  }

  // Thread-local (reused across calls) but read by all workers: inside the parallel region the
  // name would denote each worker's own instance, so the workers get a reference to this one.
  thread_local GatherTable table_of_this_thread;
  const GatherTable& table = table_of_this_thread;
  build_table(g, table_of_this_thread);

  const int threads = omp_get_max_threads();
  const int64_t image_floats = g.pixels() * kp;
  int64_t group = std::max<int64_t>(1, kItemColumnBytes / (image_floats * 4));
  group = std::min(group, (g.n + threads - 1) / threads);  // every thread gets work
  const int64_t items = (g.n + group - 1) / group;
  // One column buffer per thread, with guards on each side: a load may start up to kLanes - 1
  // floats before a run, and read past the end (guard_after); those lanes are masked off.
  const int64_t buffer_floats = group * image_floats + kLanes + guard_after(g);
  Tensor col_buffer = Tensor::empty(Shape{int64_t(threads) * buffer_floats});
  float* cols = col_buffer.data<float>();
  const float* dyd = dy.data<float>();
  float* dxd = dx.data<float>();
  const int64_t dy_image = g.pixels() * g.o, dx_image = g.h * g.row_len();
  std::exception_ptr error;
#pragma omp parallel for schedule(static) if (items > 1)
  for (int64_t item = 0; item < items; ++item) {
    try {
      float* col = cols + omp_get_thread_num() * buffer_floats + kLanes;
      const int64_t n0 = item * group, count = std::min(group, g.n - n0);
      run_gemm(dyd + n0 * dy_image, wt, col, count * g.pixels(), g.o, kp);
      for (int64_t i = 0; i < count; ++i)
        col2im_image(g, table, col + i * image_floats, dxd + (n0 + i) * dx_image);
    } catch (...) {
#pragma omp critical(kiln_gemm_backward_data_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

#else  // a baseline below AVX2: the conv ops use oneDNN

bool can_run_gemm_backward_data(const Tensor&, const Shape&, const Shape&, const ConvAttrs&) {
  return false;
}
void gemm_backward_data(const Tensor&, const Tensor&, Tensor&) {
  throw Error("gemm_backward_data: runs only where AVX2 or AVX-512 does");
}

#endif

}  // namespace kiln::ops::KILN_ISA
KILN_ISA_TARGET_END

#if KILN_ISA_DISPATCH
namespace kiln::ops {

KILN_ISA_DECLARE(bool can_run_gemm_backward_data(const Tensor& dy, const Shape& w_shape,
                                                 const Shape& x_shape, const ConvAttrs& a))
KILN_ISA_DECLARE(void gemm_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx))

bool can_run_gemm_backward_data(const Tensor& dy, const Shape& w_shape, const Shape& x_shape,
                                const ConvAttrs& a) {
  return KILN_ISA_CALL(can_run_gemm_backward_data, dy, w_shape, x_shape, a);
}
void gemm_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  KILN_ISA_CALL(gemm_backward_data, dy, w, dx);
}

}  // namespace kiln::ops
#endif
