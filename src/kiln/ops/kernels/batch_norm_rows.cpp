#include "kiln/ops/kernels/batch_norm_rows.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/isa_variant.h"

// GCC 12's AVX-512 intrinsics (batch_norm_vec.h) trip -W[maybe-]uninitialized on their
// undefined-register idiom; the warning lands wherever they are inlined, so it is off for the
// whole file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

KILN_ISA_TARGET_BEGIN
#include "kiln/ops/detail/batch_norm_vec.h"
namespace kiln::ops::KILN_ISA {
namespace {
using namespace batch_norm_vec;

// ---- The flat loop. The rows × C elements are walked as one flat array in periods of P
// positions, P a multiple of C (so position p is channel p % C) and, where possible, of 16 (so a
// period is whole vectors whatever C is: C = 16 is one vector a row, C = 24 three vectors per two
// rows). Per-channel constants are laid out per position once, and a period of up to 4 vectors
// gets fully unrolled loops with its accumulators in registers: rows here are only 64–256
// bytes, too short for a loop over channels inside a loop over rows to run at memory speed.

// Below this many elements one thread beats waking the team.
constexpr int64_t kParallelMin = 1 << 15;
// Partial sums are float over this many iterations, then added into double: the float sums
// stay short (accurate), the double adds stay rare (cheap).
constexpr int kFlushEvery = 64;
constexpr int kMaxFixedVectors = 4;

struct Plan {
  int64_t channels = 0, total = 0;
  int64_t period = 0;     // positions per period
  int64_t periods = 0;    // whole periods in `total`; the rest is a scalar tail
  int fixed_vectors = 0;  // 1..kMaxFixedVectors: period = 16·fixed_vectors; 0: any period
  bool parallel = false;
  // Blocked (nChw16c): a period is one row of 16 channels, and every chunk_rows (= H·W)
  // consecutive rows form a chunk of channel block chunk % blocks. Positions, the index of the
  // per-position constants and partial sums, are then the C channels themselves.
  int64_t chunk_rows = 0;  // 0: rows × C
  int64_t blocks = 0;      // C / 16
  bool blocked() const { return chunk_rows > 0; }
  int64_t positions() const { return blocked() ? channels : period; }
};

Plan make_plan(int64_t rows, int64_t channels) {
  Plan p;
  p.channels = channels;
  p.total = rows * channels;
  const int64_t lcm = std::lcm(channels, int64_t{16});
  if (lcm <= 16 * kMaxFixedVectors) {
    p.fixed_vectors = int(lcm / 16);
    p.period = lcm;
  } else {
    p.period = lcm <= 4096 ? lcm : channels;
  }
  p.periods = p.total / p.period;
  p.parallel = p.total >= kParallelMin && !omp_in_parallel();
  return p;
}

// x is logically [N, C, H, W] in nChw16c, C % 16 == 0, C > 0. The periods (rows of 16) split
// over threads by my_periods alike in the statistics and the normalize pass, so each thread
// normalizes the rows its statistics pass just brought into its cache.
Plan make_blocked_plan(const Tensor& x) {
  Plan p;
  p.channels = x.dim(1);
  p.total = x.numel();
  p.period = 16;
  p.periods = p.total / 16;
  p.fixed_vectors = 1;
  p.chunk_rows = x.dim(2) * x.dim(3);
  p.blocks = p.channels / 16;
  p.parallel = p.total >= kParallelMin && !omp_in_parallel();
  return p;
}

std::vector<float> per_position(const Plan& plan, const float* per_channel) {
  std::vector<float> out(static_cast<size_t>(plan.positions()));
  for (int64_t p = 0; p < plan.positions(); ++p) out[size_t(p)] = per_channel[p % plan.channels];
  return out;
}

// gamma·inv_std per position, the scale normalize() multiplies by. The backward recomputes the
// relu mask with it, so both must round it alike: this one function does it for both.
std::vector<float> scale_per_position(const Plan& plan, const float* gamma, const float* inv_std) {
  std::vector<float> scale(static_cast<size_t>(plan.channels));
  for (int64_t i = 0; i < plan.channels; ++i) {
    scale[size_t(i)] = batch_norm_scale(gamma[i], inv_std[i]);
  }
  return per_position(plan, scale.data());
}

// This thread's share of the periods (static, contiguous); the last thread also takes the tail.
struct Range {
  int64_t begin, end;
  bool last;
};
Range my_periods(const Plan& plan) {
  const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
  return {plan.periods * t / threads, plan.periods * (t + 1) / threads, t == threads - 1};
}

// f(Width<W>, offset, position) -> {a, b} for W elements at a flat offset; sums land in pa/pb
// (per position, double).
template <int kV, class F>
void reduce_fixed(F& f, Range r, double* pa, double* pb) {
  constexpr int64_t kPeriod = 16 * kV;
  constexpr int kUnroll = kV == 1 ? 4 : (kV == 2 ? 2 : 1);  // independent add chains
  constexpr int kAcc = kUnroll * kV;
  // Every loop over the accumulators is unrolled, so they stay in registers (a loop with a
  // variable index would put them on the stack, and the sums would run at store-forwarding speed).
  Vec<16> acc_a[kAcc], acc_b[kAcc];
#pragma GCC unroll 16
  for (int i = 0; i < kAcc; ++i) acc_a[i] = acc_b[i] = vzero<16>();
  // The add chains of one position merge in float, so a flush widens one vector per position:
  // blocked data flushes every H·W rows (49, say), where kUnroll widenings would be a cost.
  auto flush = [&] {
#pragma GCC unroll 16
    for (int v = 0; v < kV; ++v) {
      Vec<16> a = acc_a[v], b = acc_b[v];
#pragma GCC unroll 16
      for (int u = 1; u < kUnroll; ++u) {
        a = vadd(a, acc_a[u * kV + v]);
        b = vadd(b, acc_b[u * kV + v]);
      }
      vadd_to(pa + 16 * v, a);
      vadd_to(pb + 16 * v, b);
    }
#pragma GCC unroll 16
    for (int i = 0; i < kAcc; ++i) acc_a[i] = acc_b[i] = vzero<16>();
  };
  int64_t s = r.begin;
  int n = 0;
  for (; s + kUnroll <= r.end; s += kUnroll) {
#pragma GCC unroll 16
    for (int u = 0; u < kUnroll; ++u) {
#pragma GCC unroll 16
      for (int v = 0; v < kV; ++v) {
        auto [a, b] = f(Width<16>{}, (s + u) * kPeriod + 16 * v, int64_t{16} * v);
        acc_a[u * kV + v] = vadd(acc_a[u * kV + v], a);
        acc_b[u * kV + v] = vadd(acc_b[u * kV + v], b);
      }
    }
    if (++n == kFlushEvery) {
      flush();
      n = 0;
    }
  }
  for (; s < r.end; ++s) {
#pragma GCC unroll 16
    for (int v = 0; v < kV; ++v) {
      auto [a, b] = f(Width<16>{}, s * kPeriod + 16 * v, int64_t{16} * v);
      acc_a[v] = vadd(acc_a[v], a);
      acc_b[v] = vadd(acc_b[v], b);
    }
  }
  flush();
}

// A blocked thread range cut at chunk boundaries: seg(rows, c0) for each piece, c0 = 16·block
// being the first channel of the piece's chunk. A thread's range may start and end inside a
// chunk: the split is by rows, so threads stay balanced however few chunks there are.
template <class F>
void for_each_chunk_piece(const Plan& plan, Range r, F seg) {
  for (int64_t s = r.begin; s < r.end;) {
    const int64_t chunk = s / plan.chunk_rows;
    const int64_t end = std::min(r.end, (chunk + 1) * plan.chunk_rows);
    seg(Range{s, end, false}, 16 * (chunk % plan.blocks));
    s = end;
  }
}

// Blocked: each piece is rows of one vector, the C = 16 loop with the functor's constants and the
// partial sums moved to the piece's channel block.
template <class F>
void reduce_blocked(const F& f, const Plan& plan, Range r, double* pa, double* pb) {
  for_each_chunk_piece(plan, r, [&](Range piece, int64_t c0) {
    auto shifted = [f, c0](auto w, int64_t off, int64_t pos) { return f(w, off, c0 + pos); };
    reduce_fixed<1>(shifted, piece, pa + c0, pb + c0);
  });
}

template <class F>
void reduce_any(F& f, int64_t period, Range r, double* pa, double* pb) {
  std::vector<float> acc(static_cast<size_t>(2 * period), 0.0f);
  float* fa = acc.data();
  float* fb = fa + period;
  const int64_t vectors_end = period - period % 16;
  auto flush = [&] {
    for (int64_t p = 0; p < period; ++p) {
      pa[p] += double(fa[p]);
      pb[p] += double(fb[p]);
      fa[p] = fb[p] = 0.0f;
    }
  };
  int n = 0;
  for (int64_t s = r.begin; s < r.end; ++s) {
    const int64_t base = s * period;
    for (int64_t j = 0; j < vectors_end; j += 16) {
      auto [a, b] = f(Width<16>{}, base + j, j);
      vstore<16>(fa + j, vadd(vload<16>(fa + j), a));
      vstore<16>(fb + j, vadd(vload<16>(fb + j), b));
    }
    for (int64_t j = vectors_end; j < period; ++j) {
      auto [a, b] = f(Width<1>{}, base + j, j);
      fa[j] += a.v[0];
      fb[j] += b.v[0];
    }
    if (++n == kFlushEvery) {
      flush();
      n = 0;
    }
  }
  flush();
}

// Per-channel sums of f's two values over all elements, into sum_a/sum_b [C].
template <class F>
void reduce(const Plan& plan, F f, double* sum_a, double* sum_b) {
  const int64_t period = plan.period, positions = plan.positions();
  const int teams = plan.parallel ? omp_get_max_threads() : 1;
  std::vector<double> parts(size_t(teams) * size_t(2 * positions), 0.0);
#pragma omp parallel if (plan.parallel)
  {
    // A private copy of the functor: its captured pointers then live in registers, where the
    // shared one would be reloaded after every store (which might, for all the compiler knows,
    // have changed it).
    F f_local = f;
    const Range r = my_periods(plan);
    double* pa = parts.data() + size_t(omp_get_thread_num()) * size_t(2 * positions);
    double* pb = pa + positions;
    switch (plan.blocked() ? -1 : plan.fixed_vectors) {
      case -1:
        reduce_blocked(f_local, plan, r, pa, pb);
        break;
      case 1:
        reduce_fixed<1>(f_local, r, pa, pb);
        break;
      case 2:
        reduce_fixed<2>(f_local, r, pa, pb);
        break;
      case 3:
        reduce_fixed<3>(f_local, r, pa, pb);
        break;
      case 4:
        reduce_fixed<4>(f_local, r, pa, pb);
        break;
      default:
        reduce_any(f_local, period, r, pa, pb);
    }
    if (r.last) {
      const int64_t tail = plan.periods * period;
      for (int64_t off = tail; off < plan.total; ++off) {
        auto [a, b] = f_local(Width<1>{}, off, off - tail);
        pa[off - tail] += a.v[0];
        pb[off - tail] += b.v[0];
      }
    }
  }
  std::fill(sum_a, sum_a + plan.channels, 0.0);
  std::fill(sum_b, sum_b + plan.channels, 0.0);
  for (int t = 0; t < teams; ++t) {
    const double* pa = parts.data() + size_t(t) * size_t(2 * positions);
    for (int64_t p = 0; p < positions; ++p) {
      sum_a[p % plan.channels] += pa[p];
      sum_b[p % plan.channels] += pa[positions + p];
    }
  }
}

// f(Width<W>, offset, position) for every element, W at a time. Each thread walks its share
// backwards: the share is the one its reduce pass just read forwards (my_periods), so the last
// rows that pass read, still in this core's L2, are the first ones read again here. (Beyond L2
// a tensor reads at ~55 GB/s here, from L2 at ~150. Isolated, batch 128: training forward
// 16x28x28 0.37 -> 0.29 ms, backward with relu mask 0.62 -> 0.52; within a ResNet-20 step the
// batch-norm kernels gain ~2%, 0.4 of 21 ms.) Elementwise, so the order changes no result.
// `done()` runs on each thread after its share.
struct Nothing {
  void operator()() const {}
};
template <class F, class Done = Nothing>
void map(const Plan& plan, F f_shared, Done done = {}) {
  const int64_t period = plan.period;
#pragma omp parallel if (plan.parallel)
  {
    F f = f_shared;  // private: see reduce
    const Range r = my_periods(plan);
    if (r.last) {
      const int64_t tail = plan.periods * period;
      for (int64_t off = plan.total - 1; off >= tail; --off) f(Width<1>{}, off, off - tail);
    }
    auto fixed = [&](auto kv) {
      constexpr int kV = decltype(kv)::value;
      for (int64_t s = r.end - 1; s >= r.begin; --s) {
#pragma GCC unroll 16
        for (int v = 0; v < kV; ++v) f(Width<16>{}, s * 16 * kV + 16 * v, int64_t{16} * v);
      }
    };
    switch (plan.blocked() ? -1 : plan.fixed_vectors) {
      case -1:
        // Pieces of one channel block each, last piece first.
        for (int64_t end = r.end; end > r.begin;) {
          const int64_t chunk = (end - 1) / plan.chunk_rows;
          const int64_t begin = std::max(r.begin, chunk * plan.chunk_rows);
          const int64_t c0 = 16 * (chunk % plan.blocks);
          for (int64_t s = end - 1; s >= begin; --s) f(Width<16>{}, s * 16, c0);
          end = begin;
        }
        break;
      case 1:
        fixed(Width<1>{});
        break;
      case 2:
        fixed(Width<2>{});
        break;
      case 3:
        fixed(Width<3>{});
        break;
      case 4:
        fixed(Width<4>{});
        break;
      default: {
        const int64_t vectors_end = period - period % 16;
        for (int64_t s = r.end - 1; s >= r.begin; --s) {
          const int64_t base = s * period;
          for (int64_t j = 0; j < vectors_end; j += 16) f(Width<16>{}, base + j, j);
          for (int64_t j = vectors_end; j < period; ++j) f(Width<1>{}, base + j, j);
        }
      }
    }
    done();
  }
}

// ---- The four passes.

// Per-channel mean and biased variance in one read. Sums are of x - shift, shift being the
// first row (n = h = w = 0): with shift near the data, Σ(x-shift)² - (Σ(x-shift))²/M does not
// cancel away the variance the way E[x²] - E[x]² does when |mean| ≫ std.
template <class T>
void batch_stats(const T* x, const Plan& plan, double* mean, double* var) {
  const int64_t c = plan.channels, rows = plan.total / c;
  std::vector<float> shift_c(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i) {
    const int64_t at = plan.blocked() ? (i / 16) * plan.chunk_rows * 16 + i % 16 : i;
    shift_c[size_t(i)] = to_float(x[at]);
  }
  const std::vector<float> shift = per_position(plan, shift_c.data());
  const float* s = shift.data();
  std::vector<double> sum(static_cast<size_t>(c)), sq(static_cast<size_t>(c));
  reduce(
      plan,
      [x, s](auto w, int64_t off, int64_t pos) {
        constexpr int W = decltype(w)::value;
        const Vec<W> d = vsub(vload<W>(x + off), vload<W>(s + pos));
        return std::pair{d, vmul(d, d)};
      },
      sum.data(), sq.data());
  for (int64_t i = 0; i < c; ++i) {
    const double m = sum[size_t(i)] / double(rows);
    mean[i] = double(shift_c[size_t(i)]) + m;
    var[i] = std::max(0.0, sq[size_t(i)] / double(rows) - m * m);
  }
}

// kStream: y is written with streaming stores (BatchNormRowsOptions::stream_output), which
// needs f32 storage and every vector's offset 16-aligned (a plan with whole vectors per period).
template <class T, bool kResidual, bool kRelu, bool kStream>
void normalize(const T* x, const T* residual, T* y, const Plan& plan, const float* mean,
               const float* scale, const float* beta) {
  auto body = [=](auto w, int64_t off, int64_t pos) {
    constexpr int W = decltype(w)::value;
    Vec<W> v = vnormalize(vload<W>(x + off), vload<W>(mean + pos), vload<W>(scale + pos),
                          vload<W>(beta + pos));
    if constexpr (kResidual) v = vadd(v, vload<W>(residual + off));
    if constexpr (kRelu) v = vrelu(v);
    if constexpr (kStream) {
      vstream<W>(y + off, v);
    } else {
      vstore<W>(y + off, v);
    }
  };
  if constexpr (kStream) {
    map(plan, body, stream_fence);
  } else {
    map(plan, body);
  }
}

// Where the relu mask of the fused backward comes from: none, the forward's relu output r
// (pass where r > 0), or x itself, recomputing the forward's pre-relu value
// fma(x - mean, gamma·inv_std, beta) exactly as normalize() did (pass where it is > 0: the
// same elements, without reading r).
enum class Mask { none, from_output, from_input };

// What the mask reads: r (from_output), or the per-position scale and beta (from_input).
template <class T>
struct MaskSource {
  const T* relu_out = nullptr;
  const float* scale = nullptr;
  const float* beta = nullptr;
};

template <Mask kMask, int W, class T>
inline Vec<W> masked(Vec<W> g, const MaskSource<T>& m, Vec<W> xmu, int64_t off, int64_t pos) {
  if constexpr (kMask == Mask::from_output) return vpass(vload<W>(m.relu_out + off), g);
  if constexpr (kMask == Mask::from_input) {
    return vpass(vfma(xmu, vload<W>(m.scale + pos), vload<W>(m.beta + pos)), g);
  }
  return g;
}

template <class T, Mask kMask>
void grad_sums(const T* dy, MaskSource<T> m, const T* x, const Plan& plan, const float* mean,
               double* sum_dy, double* sum_dy_xmu) {
  reduce(
      plan,
      [=](auto w, int64_t off, int64_t pos) {
        constexpr int W = decltype(w)::value;
        const Vec<W> xmu = vsub(vload<W>(x + off), vload<W>(mean + pos));
        const Vec<W> g = masked<kMask>(vload<W>(dy + off), m, xmu, off, pos);
        return std::pair{g, vmul(g, xmu)};
      },
      sum_dy, sum_dy_xmu);
}

// dx = k_dy·dy + k_xmu·(x - mean) + k_const.
template <class T, Mask kMask>
void grad_input(const T* dy, MaskSource<T> m, const T* x, T* dx, const Plan& plan,
                const float* mean, const float* k_dy, const float* k_xmu, const float* k_const) {
  map(plan, [=](auto w, int64_t off, int64_t pos) {
    constexpr int W = decltype(w)::value;
    const Vec<W> xmu = vsub(vload<W>(x + off), vload<W>(mean + pos));
    const Vec<W> g = masked<kMask>(vload<W>(dy + off), m, xmu, off, pos);
    const Vec<W> rest = vfma(xmu, vload<W>(k_xmu + pos), vload<W>(k_const + pos));
    vstore<W>(dx + off, vfma(g, vload<W>(k_dy + pos), rest));
  });
}

// The first pass of batch_norm_rows_backward_add_relu: dy = (a + b) where relu_out > 0, as
// add then relu_grad computed it (rounded to the storage type once, where add's result was),
// stored, and summed as grad_sums sums it.
template <class T>
void grad_sums_of_masked_sum(const T* a, const T* b, const T* relu_out, const T* x, T* dy,
                             const Plan& plan, const float* mean, double* sum_dy,
                             double* sum_dy_xmu) {
  reduce(
      plan,
      [=](auto w, int64_t off, int64_t pos) {
        constexpr int W = decltype(w)::value;
        Vec<W> g = vpass(vload<W>(relu_out + off), vadd(vload<W>(a + off), vload<W>(b + off)));
        vstore<W>(dy + off, g);
        if constexpr (!std::is_same_v<T, float>) g = vload<W>(dy + off);
        const Vec<W> xmu = vsub(vload<W>(x + off), vload<W>(mean + pos));
        return std::pair{g, vmul(g, xmu)};
      },
      sum_dy, sum_dy_xmu);
}

// The two gradient sums per channel over this tensor's rows (`local`), and over the whole batch
// (`whole`: the same where the tensor is the batch, the parts' added up where it is one of
// them).
struct GradientSums {
  std::vector<double> sum_dy, sum_dy_xmu;
  int64_t rows = 0;
  explicit GradientSums(int64_t c, int64_t rows_ = 0)
      : sum_dy(static_cast<size_t>(c)), sum_dy_xmu(static_cast<size_t>(c)), rows(rows_) {}
};

// The whole batch's sums from each part's, added in part order (so every part gets the same
// bits).
GradientSums whole_batch_sums(const GradientSums& local, const BatchParts* parts) {
  if (parts == nullptr) return local;
  const size_t c = local.sum_dy.size();
  std::vector<double> mine{double(local.rows)};
  mine.insert(mine.end(), local.sum_dy.begin(), local.sum_dy.end());
  mine.insert(mine.end(), local.sum_dy_xmu.begin(), local.sum_dy_xmu.end());
  const std::vector<double> all = parts->all_gather(mine);
  GradientSums whole{int64_t(c)};
  for (size_t k = 0; k < all.size(); k += mine.size()) {
    whole.rows += int64_t(all[k]);
    for (size_t i = 0; i < c; ++i) {
      whole.sum_dy[i] += all[k + 1 + i];
      whole.sum_dy_xmu[i] += all[k + 1 + c + i];
    }
  }
  return whole;
}

// From the sums: dgamma, dbeta (this tensor's), and the per-position coefficients of
// dx = k_dy·dy + k_xmu·(x - mean) + k_const (the whole batch's statistics depend on every row).
struct InputGradient {
  std::vector<float> k_dy, k_xmu, k_const;
};
InputGradient input_gradient(const Plan& plan, const GradientSums& local, const GradientSums& whole,
                             const float* gamma, const float* inv_std, bool training, float* dgamma,
                             float* dbeta) {
  const int64_t c = plan.channels;
  std::vector<float> k_dy(static_cast<size_t>(c)), k_xmu(static_cast<size_t>(c)),
      k_const(static_cast<size_t>(c));
  const double inv_rows = 1.0 / double(whole.rows);
  for (int64_t i = 0; i < c; ++i) {
    const double s = inv_std[i], k = double(gamma[i]) * s;
    dgamma[i] = float(local.sum_dy_xmu[size_t(i)] * s);
    dbeta[i] = float(local.sum_dy[size_t(i)]);
    const double sdy = whole.sum_dy[size_t(i)], sdxmu = whole.sum_dy_xmu[size_t(i)];
    k_dy[size_t(i)] = float(k);
    // In eval the statistics are constants, so only the direct term remains.
    k_xmu[size_t(i)] = training ? float(-k * s * s * sdxmu * inv_rows) : 0.0f;
    k_const[size_t(i)] = training ? float(-k * sdy * inv_rows) : 0.0f;
  }
  return {per_position(plan, k_dy.data()), per_position(plan, k_xmu.data()),
          per_position(plan, k_const.data())};
}

// Calls f(std::integral_constant<Mask, ...>) for the runtime choice.
template <class F>
void with_mask(Mask m, F f) {
  switch (m) {
    case Mask::none:
      return f(std::integral_constant<Mask, Mask::none>{});
    case Mask::from_output:
      return f(std::integral_constant<Mask, Mask::from_output>{});
    case Mask::from_input:
      return f(std::integral_constant<Mask, Mask::from_input>{});
  }
}

template <class F>
void with_storage(DType t, F f) {
  if (t == DType::bf16) {
    f(bf16_t{});
  } else {
    f(float{});
  }
}

}  // namespace

namespace {

// The whole batch's mean and biased variance per channel from each part's (its rows, mean and
// variance), gathered in part order and combined as Chan, Golub and LeVeque's pairwise update
// does, which keeps the variance as accurate as one pass over the whole batch. Returns the
// whole batch's rows.
int64_t whole_batch_statistics(const BatchParts& parts, int64_t rows, int64_t c,
                               std::vector<double>& mean, std::vector<double>& var) {
  std::vector<double> mine{double(rows)};
  mine.insert(mine.end(), mean.begin(), mean.end());
  mine.insert(mine.end(), var.begin(), var.end());
  const std::vector<double> all = parts.all_gather(mine);
  const size_t stride = mine.size(), cs = size_t(c);
  double whole_rows = 0;
  for (size_t k = 0; k < all.size(); k += stride) whole_rows += all[k];
  for (size_t i = 0; i < cs; ++i) {
    double m = 0;
    for (size_t k = 0; k < all.size(); k += stride) m += all[k] * all[k + 1 + i];
    m /= whole_rows;
    double m2 = 0;
    for (size_t k = 0; k < all.size(); k += stride) {
      const double d = all[k + 1 + i] - m;
      m2 += all[k] * (all[k + 1 + cs + i] + d * d);
    }
    mean[i] = m;
    var[i] = m2 / whole_rows;
  }
  return int64_t(whole_rows);
}

// The statistics half of batch_norm_rows_forward: mean and inv_std, and in training the running
// statistics' update. Returns false where there is nothing to normalize.
bool statistics(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                const BatchNormRowsOptions& o, const Plan* plan, float* mean, float* inv_std) {
  const int64_t c = x.dim(1), rows = c > 0 ? x.numel() / c : 0;
  float* rm = running_mean.data<float>();
  float* rv = running_var.data<float>();
  if (rows == 0 || c == 0) {
    for (int64_t i = 0; i < c; ++i) {
      mean[i] = o.training ? 0.0f : rm[i];
      inv_std[i] = float(1.0 / std::sqrt((o.training ? 0.0 : double(rv[i])) + o.eps));
    }
    return false;
  }
  if (o.training) {
    std::vector<double> m(static_cast<size_t>(c)), v(static_cast<size_t>(c));
    with_storage(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      batch_stats<T>(x.data<T>(), *plan, m.data(), v.data());
    });
    const int64_t n = o.parts ? whole_batch_statistics(*o.parts, rows, c, m, v) : rows;
    const bool update = o.parts == nullptr || o.parts->updates_running_statistics();
    const double mom = o.momentum, unbias = n > 1 ? double(n) / double(n - 1) : 1.0;
    for (int64_t i = 0; i < c; ++i) {
      const double var = v[size_t(i)];
      mean[i] = float(m[size_t(i)]);
      inv_std[i] = float(1.0 / std::sqrt(var + o.eps));
      if (update) {
        rm[i] = float(mom * rm[i] + (1 - mom) * m[size_t(i)]);
        rv[i] = float(mom * rv[i] + (1 - mom) * var * unbias);
      }
    }
  } else {
    for (int64_t i = 0; i < c; ++i) {
      mean[i] = rm[i];
      inv_std[i] = float(1.0 / std::sqrt(double(rv[i]) + o.eps));
    }
  }
  return true;
}

Plan plan_for(const Tensor& x, bool blocked) {
  const int64_t c = x.dim(1), rows = c > 0 ? x.numel() / c : 0;
  return blocked ? make_blocked_plan(x) : make_plan(rows, std::max<int64_t>(c, 1));
}

}  // namespace

void batch_norm_rows_statistics(const Tensor& x, const Tensor& running_mean,
                                const Tensor& running_var, const BatchNormRowsOptions& o,
                                const Tensor& mean_t, const Tensor& inv_std_t) {
  if (!can_run_batch_norm(x, {}, o.blocked)) {
    throw Error(std::string("batch_norm_rows_statistics: x ") + describe(x) + " is not " +
                batch_norm_layout_requirement(o.blocked));
  }
  const Plan plan = plan_for(x, o.blocked);
  statistics(x, running_mean, running_var, o, &plan, mean_t.data<float>(), inv_std_t.data<float>());
}

void batch_norm_rows_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             const Tensor& running_mean, const Tensor& running_var,
                             const Tensor* residual, const BatchNormRowsOptions& o, const Tensor& y,
                             const Tensor& mean_t, const Tensor& inv_std_t) {
  if (!can_run_batch_norm(x, {&y, residual}, o.blocked)) {
    throw Error(std::string("batch_norm_rows_forward: tensors are not ") +
                batch_norm_layout_requirement(o.blocked) + ": x " + describe(x) + ", y " +
                describe(y) + (residual ? ", residual " + describe(*residual) : std::string()));
  }
  float* mean = mean_t.data<float>();
  float* inv_std = inv_std_t.data<float>();
  const Plan plan = plan_for(x, o.blocked);
  if (!statistics(x, running_mean, running_var, o, &plan, mean, inv_std)) return;
  const std::vector<float> mean_p = per_position(plan, mean);
  const std::vector<float> scale_p = scale_per_position(plan, gamma.data<float>(), inv_std);
  const std::vector<float> beta_p = per_position(plan, beta.data<float>());
  const bool whole_vectors = plan.blocked() || plan.fixed_vectors > 0;
  const bool stream = o.stream_output && x.dtype() == DType::f32 && whole_vectors &&
                      reinterpret_cast<uintptr_t>(y.raw_data()) % 64 == 0;
  with_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* rp = residual ? residual->data<T>() : nullptr;
    T* yp = y.data<T>();
    auto run = [&](auto kernel) {
      kernel(xp, rp, yp, plan, mean_p.data(), scale_p.data(), beta_p.data());
    };
    // Streaming stores are f32 only (`stream` says so), so bf16 instantiates none.
    auto choose = [&](auto residual_tag, auto relu_tag) {
      constexpr bool kResidual = decltype(residual_tag)::value, kRelu = decltype(relu_tag)::value;
      if constexpr (std::is_same_v<T, float>) {
        if (stream) return run(normalize<T, kResidual, kRelu, true>);
      }
      run(normalize<T, kResidual, kRelu, false>);
    };
    using Yes = std::true_type;
    using No = std::false_type;
    if (rp && o.relu) {
      choose(Yes{}, Yes{});
    } else if (rp) {
      choose(Yes{}, No{});
    } else if (o.relu) {
      choose(No{}, Yes{});
    } else {
      choose(No{}, No{});
    }
  });
}

namespace {

// The start both backward kernels share: every tensor in `like_x` (null entries skipped) must
// be laid out like x; an empty x gives zero dgamma and dbeta and no plan (nothing left to do).
std::optional<Plan> backward_plan(const char* fn, const Tensor& x,
                                  std::initializer_list<const Tensor*> like_x, bool blocked,
                                  const Tensor& dgamma, const Tensor& dbeta) {
  if (!can_run_batch_norm(x, like_x, blocked)) {
    std::string described = "x " + describe(x);
    for (const Tensor* t : like_x) {
      if (t != nullptr) described += ", " + describe(*t);
    }
    throw Error(std::string(fn) + ": tensors are not " + batch_norm_layout_requirement(blocked) +
                ": " + described);
  }
  const int64_t c = x.dim(1), rows = c > 0 ? x.numel() / c : 0;
  if (rows == 0 || c == 0) {
    std::fill(dgamma.data<float>(), dgamma.data<float>() + c, 0.0f);
    std::fill(dbeta.data<float>(), dbeta.data<float>() + c, 0.0f);
    return std::nullopt;
  }
  return blocked ? make_blocked_plan(x) : make_plan(rows, c);
}

}  // namespace

void batch_norm_rows_backward(const Tensor& dy, const Tensor* relu_out, const Tensor& x,
                              const Tensor& gamma, const Tensor& mean_t, const Tensor& inv_std_t,
                              bool training, const Tensor& dx, const Tensor& dgamma_t,
                              const Tensor& dbeta_t, bool blocked, const Tensor* relu_beta,
                              const BatchParts* parts) {
  const std::optional<Plan> maybe_plan = backward_plan(
      "batch_norm_rows_backward", x, {&dy, &dx, relu_out}, blocked, dgamma_t, dbeta_t);
  if (!maybe_plan) return;
  const Plan& plan = *maybe_plan;
  const int64_t c = plan.channels;
  float* dgamma = dgamma_t.data<float>();
  float* dbeta = dbeta_t.data<float>();
  const float* g = gamma.data<float>();
  const float* mean = mean_t.data<float>();
  const float* is = inv_std_t.data<float>();
  const std::vector<float> mean_p = per_position(plan, mean);
  // The relu mask from x where the storage is f32: rounding the pre-relu value to bf16 could
  // turn a tiny positive one into 0, so bf16 reads r.
  const Mask mask = relu_out == nullptr                               ? Mask::none
                    : relu_beta != nullptr && x.dtype() == DType::f32 ? Mask::from_input
                                                                      : Mask::from_output;
  std::vector<float> scale_p, beta_p;
  if (mask == Mask::from_input) {
    if (relu_beta->dtype() != DType::f32 || relu_beta->shape() != Shape{c} ||
        !relu_beta->is_contiguous()) {
      throw Error("batch_norm_rows_backward: beta must be contiguous f32[" + std::to_string(c) +
                  "], got " + describe(*relu_beta));
    }
    // As the forward computed it: the same float products, so the same fma, bit for bit.
    scale_p = scale_per_position(plan, g, is);
    beta_p = per_position(plan, relu_beta->data<float>());
  }
  GradientSums local(c, plan.total / c);
  with_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const MaskSource<T> m{mask == Mask::from_output ? relu_out->data<T>() : nullptr, scale_p.data(),
                          beta_p.data()};
    with_mask(mask, [&](auto kind) {
      constexpr Mask kMask = decltype(kind)::value;
      grad_sums<T, kMask>(dy.data<T>(), m, x.data<T>(), plan, mean_p.data(), local.sum_dy.data(),
                          local.sum_dy_xmu.data());
      const GradientSums whole = whole_batch_sums(local, training ? parts : nullptr);
      const InputGradient k = input_gradient(plan, local, whole, g, is, training, dgamma, dbeta);
      grad_input<T, kMask>(dy.data<T>(), m, x.data<T>(), dx.data<T>(), plan, mean_p.data(),
                           k.k_dy.data(), k.k_xmu.data(), k.k_const.data());
    });
  });
}

void batch_norm_rows_backward_add_relu(const Tensor& a, const Tensor& b, const Tensor& relu_out,
                                       const Tensor& x, const Tensor& gamma, const Tensor& mean_t,
                                       const Tensor& inv_std_t, bool training, const Tensor& dy,
                                       const Tensor& dx, const Tensor& dgamma_t,
                                       const Tensor& dbeta_t, bool blocked,
                                       const BatchParts* parts) {
  const std::optional<Plan> maybe_plan =
      backward_plan("batch_norm_rows_backward_add_relu", x, {&a, &b, &relu_out, &dy, &dx}, blocked,
                    dgamma_t, dbeta_t);
  if (!maybe_plan) return;
  const Plan& plan = *maybe_plan;
  const int64_t c = plan.channels;
  float* dgamma = dgamma_t.data<float>();
  float* dbeta = dbeta_t.data<float>();
  const float* is = inv_std_t.data<float>();
  const std::vector<float> mean_p = per_position(plan, mean_t.data<float>());
  GradientSums local(c, plan.total / c);
  with_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    grad_sums_of_masked_sum<T>(a.data<T>(), b.data<T>(), relu_out.data<T>(), x.data<T>(),
                               dy.data<T>(), plan, mean_p.data(), local.sum_dy.data(),
                               local.sum_dy_xmu.data());
    const GradientSums whole = whole_batch_sums(local, training ? parts : nullptr);
    const InputGradient k =
        input_gradient(plan, local, whole, gamma.data<float>(), is, training, dgamma, dbeta);
    grad_input<T, Mask::none>(dy.data<T>(), {}, x.data<T>(), dx.data<T>(), plan, mean_p.data(),
                              k.k_dy.data(), k.k_xmu.data(), k.k_const.data());
  });
}

}  // namespace kiln::ops::KILN_ISA
KILN_ISA_TARGET_END

#if KILN_ISA_DISPATCH
namespace kiln::ops {

// The layout rules are the same for every variant: compiled once, here.
bool is_rows_by_channels(const Tensor& t) {
  return t.defined() && t.rank() >= 2 && t.is_dense() && (t.dim(1) == 1 || t.strides()[1] == 1);
}

bool can_run_batch_norm_blocked(const Tensor& x, std::initializer_list<const Tensor*> like_x) {
  if (!x.defined() || (x.dtype() != DType::f32 && x.dtype() != DType::bf16)) return false;
  if (x.rank() != 4 || x.dim(1) % 16 != 0 || !x.is_dense()) return false;
  for (const Tensor* t : like_x) {
    if (t == nullptr || !t->defined() || t->shape() != x.shape() || t->dtype() != x.dtype() ||
        !t->is_dense()) {
      return false;
    }
  }
  return true;
}

bool can_run_batch_norm_rows(const Tensor& x, std::initializer_list<const Tensor*> like_x) {
  if (!x.defined() || (x.dtype() != DType::f32 && x.dtype() != DType::bf16)) return false;
  if (!is_rows_by_channels(x)) return false;
  for (const Tensor* t : like_x) {
    if (t == nullptr || !t->defined() || t->shape() != x.shape() || t->dtype() != x.dtype()) {
      return false;
    }
    // Strides of extent-1 dims do not matter ([N, C, 1, 1] is both layouts at once).
    for (int d = 0; d < x.rank(); ++d) {
      if (x.dim(d) > 1 && t->strides()[size_t(d)] != x.strides()[size_t(d)]) return false;
    }
  }
  return true;
}

bool can_run_batch_norm(const Tensor& x, std::initializer_list<const Tensor*> like_x,
                        bool blocked) {
  const auto can_run = blocked ? can_run_batch_norm_blocked : can_run_batch_norm_rows;
  if (!can_run(x, {})) return false;
  for (const Tensor* t : like_x) {
    if (t != nullptr && !can_run(x, {t})) return false;
  }
  return true;
}

const char* batch_norm_layout_requirement(bool blocked) {
  return blocked ? "f32/bf16 [N, C, H, W] nChw16c alike with C % 16 == 0" : "rows × C alike";
}

KILN_ISA_DECLARE(void batch_norm_rows_forward(const Tensor& x, const Tensor& gamma,
                                              const Tensor& beta, const Tensor& running_mean,
                                              const Tensor& running_var, const Tensor* residual,
                                              const BatchNormRowsOptions& options, const Tensor& y,
                                              const Tensor& mean, const Tensor& inv_std))
KILN_ISA_DECLARE(void batch_norm_rows_statistics(const Tensor& x, const Tensor& running_mean,
                                                 const Tensor& running_var,
                                                 const BatchNormRowsOptions& options,
                                                 const Tensor& mean, const Tensor& inv_std))
KILN_ISA_DECLARE(void batch_norm_rows_backward(
    const Tensor& dy, const Tensor* relu_out, const Tensor& x, const Tensor& gamma,
    const Tensor& mean, const Tensor& inv_std, bool training, const Tensor& dx,
    const Tensor& dgamma, const Tensor& dbeta, bool blocked, const Tensor* relu_beta,
    const BatchParts* parts))
KILN_ISA_DECLARE(void batch_norm_rows_backward_add_relu(
    const Tensor& a, const Tensor& b, const Tensor& relu_out, const Tensor& x, const Tensor& gamma,
    const Tensor& mean, const Tensor& inv_std, bool training, const Tensor& dy, const Tensor& dx,
    const Tensor& dgamma, const Tensor& dbeta, bool blocked, const BatchParts* parts))

void batch_norm_rows_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             const Tensor& running_mean, const Tensor& running_var,
                             const Tensor* residual, const BatchNormRowsOptions& options,
                             const Tensor& y, const Tensor& mean, const Tensor& inv_std) {
  KILN_ISA_CALL(batch_norm_rows_forward, x, gamma, beta, running_mean, running_var, residual,
                options, y, mean, inv_std);
}
void batch_norm_rows_statistics(const Tensor& x, const Tensor& running_mean,
                                const Tensor& running_var, const BatchNormRowsOptions& options,
                                const Tensor& mean, const Tensor& inv_std) {
  KILN_ISA_CALL(batch_norm_rows_statistics, x, running_mean, running_var, options, mean, inv_std);
}
void batch_norm_rows_backward(const Tensor& dy, const Tensor* relu_out, const Tensor& x,
                              const Tensor& gamma, const Tensor& mean, const Tensor& inv_std,
                              bool training, const Tensor& dx, const Tensor& dgamma,
                              const Tensor& dbeta, bool blocked, const Tensor* relu_beta,
                              const BatchParts* parts) {
  KILN_ISA_CALL(batch_norm_rows_backward, dy, relu_out, x, gamma, mean, inv_std, training, dx,
                dgamma, dbeta, blocked, relu_beta, parts);
}
void batch_norm_rows_backward_add_relu(const Tensor& a, const Tensor& b, const Tensor& relu_out,
                                       const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                       const Tensor& inv_std, bool training, const Tensor& dy,
                                       const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                       bool blocked, const BatchParts* parts) {
  KILN_ISA_CALL(batch_norm_rows_backward_add_relu, a, b, relu_out, x, gamma, mean, inv_std,
                training, dy, dx, dgamma, dbeta, blocked, parts);
}

}  // namespace kiln::ops
#endif

#pragma GCC diagnostic pop
