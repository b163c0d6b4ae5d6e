// max_pool2d_grad [+ relu_grad] feeding conv2d_backward_weights and conv2d_backward_data, as one
// graph kernel (passes/fuse_pooled_conv_grad.cpp). Why by hand: the pool's gradient is at most a
// quarter non-zero, so each surviving window adds its one contribution directly instead of dense
// kernels running over a mostly-zero gradient; no library kernel takes a gradient in that form.
// Measured: bench/README.md, section 'Kernel choices measured here'.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

// GCC 12's AVX-512 intrinsics trip -W[maybe-]uninitialized on their undefined-register idiom.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include "kiln/core/error.h"
#include "kiln/core/isa_variant.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/ops/kernels/conv_geometry.h"

KILN_ISA_TARGET_BEGIN
#include "kiln/ops/kernels/pool_window.h"
namespace kiln::graph::KILN_ISA {

#if KILN_ISA_AVX512
namespace {
using ops::conv_geometry::is_dense_channels_last;
using ops::conv_geometry::round_up;

constexpr int64_t kLanes = 16;
constexpr int64_t kWindow = 2;         // the pool's kernel and stride
constexpr int64_t kMaxChannels = 16;   // C and O: one vector holds a pixel's channels
constexpr int64_t kMaxRunVectors = 4;  // KW·C, (KW + 1)·C and KW·O floats, at most

int64_t vectors(int64_t floats) {
  return (floats + kLanes - 1) / kLanes;
}
__mmask16 lanes_below(int64_t n) {
  return n >= kLanes ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

struct Geometry {
  int64_t n, c, h, w, o, kh, kw, ph, pw, oh, ow, wy, wx;  // wy, wx: the pooled extents
  bool relu_mask, has_dx, has_db;
  int64_t padded_h() const { return h + 2 * ph; }
  int64_t padded_w() const { return w + 2 * pw; }
  int64_t row() const { return padded_w() * c; }  // a padded row, floats
  int64_t run() const { return kw * c; }
  int64_t region() const { return (kw + kWindow - 1) * c; }
  int64_t windows() const { return wy * wx; }
  // The one-input-channel path: lanes (kw, o) of the weight gradient.
  bool single_channel() const { return c == 1 && !has_dx && vectors(kw * o) <= kMaxRunVectors; }
  int64_t lanes() const { return single_channel() ? kw * o : run(); }
  int64_t expanded_row() const { return round_up(padded_w() * o, kLanes); }
  int64_t dw_floats() const { return (single_channel() ? 1 : o) * kh * vectors(lanes()) * kLanes; }
};

// An array in the kernel's workspace (SpecialKernel::set_workspace).
template <class T>
struct ScratchArray {
  T* data = nullptr;
};

// One thread's arrays. They live in the kernel's workspace, which other kernels use between
// runs, so run() clears what must start at zero: xpad's padding (and the dw, db sums).
// Per-window arrays hold 16 lanes per window.
struct ThreadScratch {
  ScratchArray<float> xpad, expanded, dxpad;
  ScratchArray<float> gradient;  // channel o's gradient at its winner (0: none)
  ScratchArray<int32_t> patch;   // where channel o's winner's input patch starts in xpad
  // dx, per window and winner row: the non-zero channels' entries (o·2 + winner column) and
  // gradients, compacted, and how many there are.
  ScratchArray<int32_t> dx_entry;
  ScratchArray<float> dx_gradient;
  std::vector<int32_t> dx_count;
  ScratchArray<float> dw;  // [o][kh][lanes] (one input channel: [kh][lanes]), 16-lane rows
  alignas(64) float db[kLanes] = {};
  explicit ThreadScratch(const Geometry& g)
      : dx_count(size_t(g.has_dx ? g.windows() * kWindow : 0)) {}
  // A vector of slack after the last row of xpad and expanded: the expansion's and the tap
  // rows' unmasked loads read up to 15 floats past a row's end (into the next row, or this
  // slack).
  static int64_t xpad_floats(const Geometry& g) { return g.padded_h() * g.row() + kLanes; }
  void carve(const Geometry& g, WorkspaceCarver& c) {
    xpad.data = c.take<float>(xpad_floats(g));
    expanded.data =
        c.take<float>(g.single_channel() ? g.padded_h() * g.expanded_row() + kLanes : 0);
    dxpad.data = c.take<float>(g.has_dx ? g.padded_h() * g.row() + kLanes : 0);
    gradient.data = c.take<float>(g.windows() * kLanes);
    patch.data = c.take<int32_t>(g.windows() * kLanes);
    dx_entry.data = c.take<int32_t>(g.has_dx ? g.windows() * kWindow * kLanes : 0);
    dx_gradient.data = c.take<float>(g.has_dx ? g.windows() * kWindow * kLanes : 0);
    dw.data = c.take<float>(g.dw_floats());
  }
};

// Constant index vectors, made once per kernel.
struct Tables {
  // Expansion: lane l of chunk k holds xpad[(16k + l) / O]; the pattern repeats every
  // `period` chunks, and chunk k's first input is first[k mod period] + (k / period) * step.
  int64_t period = 1, step = 1;
  __m512i expand[kMaxChannels];
  int64_t first[kMaxChannels];
  // Lane l of vector v of the (kw, o) weight-gradient lanes is channel (16v + l) mod O.
  __m512i channel_of_lane[kMaxRunVectors];
};

Tables make_tables(const Geometry& g) {
  Tables t;
  if (!g.single_channel()) return t;
  t.period = g.o / std::gcd(g.o, kLanes);
  t.step = t.period * kLanes / g.o;
  for (int64_t k = 0; k < t.period; ++k) {
    alignas(64) int32_t idx[kLanes];
    t.first[k] = k * kLanes / g.o;
    for (int64_t l = 0; l < kLanes; ++l) idx[l] = int32_t((k * kLanes + l) / g.o - t.first[k]);
    t.expand[k] = _mm512_load_si512(idx);
  }
  for (int64_t v = 0; v < kMaxRunVectors; ++v) {
    alignas(64) int32_t idx[kLanes];
    for (int64_t l = 0; l < kLanes; ++l) idx[l] = int32_t((v * kLanes + l) % g.o);
    t.channel_of_lane[v] = _mm512_load_si512(idx);
  }
  return t;
}

// The pooled gradient of one image, and either the pool's input or its winners.
struct ImageInputs {
  const float* dyp;  // at (n, 0, 0, 0), strides below
  int64_t channel_stride, row_stride, col_stride;
  const float* r;          // [OH][OW][O] dense, or null
  const uint8_t* winners;  // [WY][WX][O] dense (see conv_relu_pool), or null
};

// 16 channels of a pooled gradient whose channels are `stride` floats apart (NCHW).
inline __m512 gather_channels(const float* p, int64_t stride, __mmask16 lanes) {
  const __m512i at =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(int32_t(stride)));
  return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), lanes, at, p, sizeof(float));
}

struct Winners {
  __m512 g;     // each channel's gradient at its winner (0: masked by the relu, or lanes >= O)
  __m512i won;  // the winner, 0..3 in window order: bit 0 its column, bit 1 its row
};

// Window (wy, wx), all channels: what max_pool_grad.cpp's window_2x2 computes per channel.
inline Winners find_winners(const Geometry& g, const ImageInputs& in, int64_t wy, int64_t wx) {
  const __mmask16 live = lanes_below(g.o);
  const float* dp = in.dyp + wy * in.row_stride + wx * in.col_stride;
  if (in.winners != nullptr) {
    // The forward recorded them (ops/kernels/pool_window.h); only masked nodes read them.
    const __m512i code =
        _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(live, in.winners + (wy * g.wx + wx) * g.o));
    const __mmask16 alive =
        _mm512_mask_testn_epi32_mask(live, code, _mm512_set1_epi32(ops::KILN_ISA::kWindowDead));
    const __m512 gv = in.channel_stride == 1 ? _mm512_maskz_loadu_ps(alive, dp)
                                             : gather_channels(dp, in.channel_stride, alive);
    return {gv, _mm512_and_si512(code, _mm512_set1_epi32(3))};
  }
  const float* top = in.r + ((kWindow * wy) * g.ow + kWindow * wx) * g.o;
  const float* bottom = top + g.ow * g.o;
  const ops::KILN_ISA::WindowMax wm = ops::KILN_ISA::window_max_2x2(
      _mm512_maskz_loadu_ps(live, top), _mm512_maskz_loadu_ps(live, top + g.o),
      _mm512_maskz_loadu_ps(live, bottom), _mm512_maskz_loadu_ps(live, bottom + g.o));
  __m512 gv = in.channel_stride == 1 ? _mm512_maskz_loadu_ps(live, dp)
                                     : gather_channels(dp, in.channel_stride, live);
  // A window whose maximum is <= 0 (or NaN) passes nothing through the relu.
  if (g.relu_mask) {
    gv = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(wm.max, _mm512_setzero_ps(), _CMP_GT_OQ), gv);
  }
  return {gv, wm.winner};
}

// One input channel: expand the padded image (see Tables), then every window.
template <int KH, int NV>
void single_channel_image(const Geometry& g, const Tables& t, const ImageInputs& in,
                          ThreadScratch& s) {
  const int64_t es = g.expanded_row(), chunks = es / kLanes;
  for (int64_t y = 0; y < g.padded_h(); ++y) {
    const float* src = s.xpad.data + y * g.row();
    float* dst = s.expanded.data + y * es;
    for (int64_t k0 = 0, base = 0; k0 < chunks; k0 += t.period, base += t.step) {
      for (int64_t j = 0; j < t.period && k0 + j < chunks; ++j) {
        _mm512_store_ps(
            dst + (k0 + j) * kLanes,
            _mm512_permutexvar_ps(t.expand[j], _mm512_loadu_ps(src + base + t.first[j])));
      }
    }
  }
  __m512 acc[KH][NV];
  for (int r = 0; r < KH; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_load_ps(s.dw.data + (r * NV + v) * kLanes);
  __m512 db = _mm512_load_ps(s.db);
  for (int64_t wy = 0; wy < g.wy; ++wy) {
    for (int64_t wx = 0; wx < g.wx; ++wx) {
      const Winners w = find_winners(g, in, wy, wx);
      db = _mm512_add_ps(db, w.g);
      // Lane (kw, o) needs tap row kh of its winner: window row kh + (winner row), at the
      // winner's column; each of the KH + 1 rows is loaded at both columns and blended once.
      // Lanes past KW·O read finite values beyond the run and are never read back.
      __m512 gl[NV];
      __mmask16 right[NV], lower[NV];
      for (int v = 0; v < NV; ++v) {
        const __m512i wl = _mm512_permutexvar_epi32(t.channel_of_lane[v], w.won);
        gl[v] = _mm512_permutexvar_ps(t.channel_of_lane[v], w.g);
        right[v] = _mm512_test_epi32_mask(wl, _mm512_set1_epi32(1));
        lower[v] = _mm512_test_epi32_mask(wl, _mm512_set1_epi32(2));
      }
      const float* e = s.expanded.data + (kWindow * wy) * es + (kWindow * wx) * g.o;
      __m512 above[NV];
      for (int v = 0; v < NV; ++v)
        above[v] = _mm512_mask_mov_ps(_mm512_loadu_ps(e + v * kLanes), right[v],
                                      _mm512_loadu_ps(e + g.o + v * kLanes));
      for (int r = 0; r < KH; ++r) {
        for (int v = 0; v < NV; ++v) {
          const float* below = e + (r + 1) * es + v * kLanes;
          const __m512 next =
              _mm512_mask_mov_ps(_mm512_loadu_ps(below), right[v], _mm512_loadu_ps(below + g.o));
          acc[r][v] =
              _mm512_fmadd_ps(gl[v], _mm512_mask_mov_ps(above[v], lower[v], next), acc[r][v]);
          above[v] = next;
        }
      }
    }
  }
  for (int r = 0; r < KH; ++r)
    for (int v = 0; v < NV; ++v) _mm512_store_ps(s.dw.data + (r * NV + v) * kLanes, acc[r][v]);
  _mm512_store_ps(s.db, db);
}

// Every window's winners and gradients into the scratch arrays (and the compacted dx lists).
void find_all_winners(const Geometry& g, const ImageInputs& in, ThreadScratch& s) {
  const __mmask16 live = lanes_below(g.o);
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i row = _mm512_set1_epi32(int32_t(g.row())),
                channels = _mm512_set1_epi32(int32_t(g.c));
  __m512 db = _mm512_load_ps(s.db);
  for (int64_t wy = 0; wy < g.wy; ++wy) {
    for (int64_t wx = 0; wx < g.wx; ++wx) {
      const Winners w = find_winners(g, in, wy, wx);
      db = _mm512_add_ps(db, w.g);
      const int64_t win = wy * g.wx + wx;
      _mm512_store_ps(s.gradient.data + win * kLanes, w.g);
      const __m512i down = _mm512_srli_epi32(w.won, 1),
                    across = _mm512_and_si512(w.won, _mm512_set1_epi32(1));
      const __m512i at = _mm512_add_epi32(
          _mm512_set1_epi32(int32_t((kWindow * wy) * g.row() + (kWindow * wx) * g.c)),
          _mm512_add_epi32(_mm512_mullo_epi32(down, row), _mm512_mullo_epi32(across, channels)));
      _mm512_store_si512(s.patch.data + win * kLanes, at);
      if (!g.has_dx) continue;
      // NEQ_UQ: a NaN gradient is kept (and spreads, as it would unfused).
      const __mmask16 nonzero =
          _mm512_mask_cmp_ps_mask(live, w.g, _mm512_setzero_ps(), _CMP_NEQ_UQ);
      const __mmask16 lower = _mm512_test_epi32_mask(w.won, _mm512_set1_epi32(2));
      const __m512i entry = _mm512_add_epi32(_mm512_add_epi32(iota, iota), across);
      for (int64_t a = 0; a < kWindow; ++a) {
        const __mmask16 keep = a == 0 ? __mmask16(nonzero & ~lower) : __mmask16(nonzero & lower);
        const int64_t list = (win * kWindow + a) * kLanes;
        _mm512_store_si512(s.dx_entry.data + list, _mm512_maskz_compress_epi32(keep, entry));
        _mm512_store_ps(s.dx_gradient.data + list, _mm512_maskz_compress_ps(keep, w.g));
        s.dx_count[size_t(win * kWindow + a)] = __builtin_popcount(keep);
      }
    }
  }
  _mm512_store_ps(s.db, db);
}

// dw[o] += g * the winner's KH runs of KW·C inputs: per output channel over all windows, the
// accumulator in registers (a channel that lost the window adds g = 0).
template <int KH, int NV>
void weight_gradient_image(const Geometry& g, ThreadScratch& s) {
  const int64_t row = g.row();
  std::array<__mmask16, NV> live;
  for (int v = 0; v < NV; ++v) live[size_t(v)] = lanes_below(g.run() - v * kLanes);
  for (int64_t o = 0; o < g.o; ++o) {
    float* acc_mem = s.dw.data + o * KH * NV * kLanes;
    __m512 acc[KH][NV];
    for (int r = 0; r < KH; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_load_ps(acc_mem + (r * NV + v) * kLanes);
    for (int64_t win = 0; win < g.windows(); ++win) {
      const __m512 gv = _mm512_set1_ps(s.gradient.data[win * kLanes + o]);
      const float* patch = s.xpad.data + s.patch.data[win * kLanes + o];
      for (int r = 0; r < KH; ++r)
        for (int v = 0; v < NV; ++v)
          acc[r][v] = _mm512_fmadd_ps(
              gv, _mm512_maskz_loadu_ps(live[size_t(v)], patch + r * row + v * kLanes), acc[r][v]);
    }
    for (int r = 0; r < KH; ++r)
      for (int v = 0; v < NV; ++v) _mm512_store_ps(acc_mem + (r * NV + v) * kLanes, acc[r][v]);
  }
}

// dxpad += each window's listed channels' weights times their gradients, placed for the
// winner's column (`placed`: [o][column][kh][RV·16]), KH rows from the winner's row.
template <int KH, int RV>
void data_gradient_image(const Geometry& g, const float* placed, ThreadScratch& s) {
  const int64_t row = g.row();
  std::array<__mmask16, RV> live;
  for (int v = 0; v < RV; ++v) live[size_t(v)] = lanes_below(g.region() - v * kLanes);
  for (int64_t wy = 0; wy < g.wy; ++wy) {
    for (int64_t wx = 0; wx < g.wx; ++wx) {
      for (int64_t a = 0; a < kWindow; ++a) {
        const int64_t list = (wy * g.wx + wx) * kWindow + a;
        const int32_t count = s.dx_count[size_t(list)];
        if (count == 0) continue;
        const int32_t* entry = s.dx_entry.data + list * kLanes;
        const float* gs = s.dx_gradient.data + list * kLanes;
        __m512 acc[KH][RV];
        for (int r = 0; r < KH; ++r)
          for (int v = 0; v < RV; ++v) acc[r][v] = _mm512_setzero_ps();
        for (int32_t i = 0; i < count; ++i) {
          const float* wp = placed + int64_t(entry[i]) * KH * RV * kLanes;
          const __m512 gv = _mm512_set1_ps(gs[i]);
          for (int r = 0; r < KH; ++r)
            for (int v = 0; v < RV; ++v)
              acc[r][v] =
                  _mm512_fmadd_ps(gv, _mm512_load_ps(wp + (r * RV + v) * kLanes), acc[r][v]);
        }
        float* base = s.dxpad.data + (kWindow * wy + a) * row + (kWindow * wx) * g.c;
        for (int r = 0; r < KH; ++r)
          for (int v = 0; v < RV; ++v) {
            float* p = base + r * row + v * kLanes;
            const __mmask16 m = live[size_t(v)];
            _mm512_mask_storeu_ps(p, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, p), acc[r][v]));
          }
      }
    }
  }
}

using SingleChannelFn = void (*)(const Geometry&, const Tables&, const ImageInputs&,
                                 ThreadScratch&);
using WeightGradientFn = void (*)(const Geometry&, ThreadScratch&);
using DataGradientFn = void (*)(const Geometry&, const float*, ThreadScratch&);

template <int KH>
constexpr std::array<SingleChannelFn, kMaxRunVectors> kSingleChannelFns = {
    single_channel_image<KH, 1>, single_channel_image<KH, 2>, single_channel_image<KH, 3>,
    single_channel_image<KH, 4>};
template <int KH>
constexpr std::array<WeightGradientFn, kMaxRunVectors> kWeightGradientFns = {
    weight_gradient_image<KH, 1>, weight_gradient_image<KH, 2>, weight_gradient_image<KH, 3>,
    weight_gradient_image<KH, 4>};
template <int KH>
constexpr std::array<DataGradientFn, kMaxRunVectors> kDataGradientFns = {
    data_gradient_image<KH, 1>, data_gradient_image<KH, 2>, data_gradient_image<KH, 3>,
    data_gradient_image<KH, 4>};

// The kernel heights with compiled register blocks.
bool supported_height(int64_t kh) {
  return kh == 3 || kh == 5;
}

template <class Fn>
Fn pick(const std::array<Fn, kMaxRunVectors>& three, const std::array<Fn, kMaxRunVectors>& five,
        int64_t kh, int64_t floats) {
  return (kh == 3 ? three : five)[size_t(vectors(floats) - 1)];
}

bool f32(const Tensor& t) {
  return t.defined() && t.dtype() == DType::f32;
}

bool fits(const Shape& x, const Shape& w, const ops::ConvAttrs& conv, bool has_dx) {
  if (x.rank() != 4 || w.rank() != 4 || w[1] != x[1]) return false;
  const std::array<int64_t, 2> one{1, 1};
  if (conv.stride != one || conv.dilation != one || conv.groups != 1 || conv.padding[0] < 0 ||
      conv.padding[1] < 0) {
    return false;
  }
  const int64_t c = x[1], o = w[0], kh = w[2], kw = w[3];
  const int64_t oh = x[2] + 2 * conv.padding[0] - kh + 1, ow = x[3] + 2 * conv.padding[1] - kw + 1;
  return c <= kMaxChannels && o <= kMaxChannels && supported_height(kh) && oh >= kWindow &&
         ow >= kWindow && vectors(kw * c) <= kMaxRunVectors &&
         (!has_dx || vectors((kw + kWindow - 1) * c) <= kMaxRunVectors);
}

// inputs: pooled gradient, pool input (the relu output), conv input x, weight (or undefined);
// outputs: dw, [db,] [dx]. attrs: the convolution's; the pool window is kWindow (the pass fuses
// only 2×2/2 pools).
std::optional<Geometry> geometry(const Node& node, std::span<const Tensor> in,
                                 std::span<const Tensor> out) {
  if (node.type != NodeType::pooled_conv_grad || in.size() != 4 || out.empty()) return {};
  const ops::ConvAttrs& a = node.attrs.as<ops::ConvAttrs>();
  const bool has_dx = in[3].defined(), has_db = a.bias_grad;
  if (out.size() != size_t(1 + int(has_db) + int(has_dx))) return {};
  const Tensor &dyp = in[0], &r = in[1], &x = in[2], &dw = out[0];
  // The pool's input r, or the winners conv_relu_pool recorded (which imply the relu mask).
  const bool recorded = r.defined() && r.dtype() == DType::u8;
  if (recorded && node.post_ops.empty()) return {};
  if (!f32(dyp) || !(f32(r) || recorded) || !f32(x) || !f32(dw) || dyp.rank() != 4 ||
      r.rank() != 4 || !fits(x.shape(), dw.shape(), a, has_dx)) {
    return {};
  }
  const int64_t oh = x.dim(2) + 2 * a.padding[0] - dw.dim(2) + 1,
                ow = x.dim(3) + 2 * a.padding[1] - dw.dim(3) + 1;
  const Geometry g{.n = x.dim(0),
                   .c = x.dim(1),
                   .h = x.dim(2),
                   .w = x.dim(3),
                   .o = dw.dim(0),
                   .kh = dw.dim(2),
                   .kw = dw.dim(3),
                   .ph = a.padding[0],
                   .pw = a.padding[1],
                   .oh = oh,
                   .ow = ow,
                   .wy = dyp.dim(2),
                   .wx = dyp.dim(3),
                   .relu_mask = !node.post_ops.empty(),
                   .has_dx = has_dx,
                   .has_db = has_db};
  const Shape r_shape = recorded ? Shape{g.n, g.o, g.wy, g.wx} : Shape{g.n, g.o, g.oh, g.ow};
  const bool shapes = r.shape() == r_shape && dyp.dim(0) == g.n && dyp.dim(1) == g.o &&
                      g.wy == g.oh / kWindow && g.wx == g.ow / kWindow;
  if (!shapes || !is_dense_channels_last(r) || !is_dense_channels_last(x) || !dw.is_contiguous()) {
    return {};
  }
  if (has_db && (!f32(out[1]) || out[1].shape() != Shape{g.o} || !out[1].is_contiguous())) {
    return {};
  }
  if (has_dx) {
    const Tensor &w = in[3], &dx = out.back();
    if (!f32(w) || w.shape() != dw.shape() || !w.is_contiguous() || !f32(dx) ||
        dx.shape() != x.shape() || !is_dense_channels_last(dx)) {
      return {};
    }
  }
  return g;
}

class PooledConvGrad : public SpecialKernel {
 public:
  PooledConvGrad(const Geometry& g, std::span<const Tensor> in, std::span<const Tensor> out)
      : g_(g),
        dyp_(in[0]),
        r_(in[1]),
        x_(in[2]),
        w_(in[3]),
        dw_(out[0]),
        db_(g.has_db ? out[1] : Tensor()),
        dx_(g.has_dx ? out.back() : Tensor()),
        threads_(std::max(1, std::min<int>(omp_get_max_threads(), int(g.n)))),
        tables_(make_tables(g)),
        single_fn_(g.single_channel()
                       ? pick(kSingleChannelFns<3>, kSingleChannelFns<5>, g.kh, g.lanes())
                       : nullptr),
        weight_fn_(pick(kWeightGradientFns<3>, kWeightGradientFns<5>, g.kh, g.run())),
        data_fn_(g.has_dx ? pick(kDataGradientFns<3>, kDataGradientFns<5>, g.kh, g.region())
                          : nullptr) {
    for (int t = 0; t < threads_; ++t) scratch_.push_back(std::make_unique<ThreadScratch>(g));
    WorkspaceCarver measure;
    carve(measure);
    workspace_bytes_ = measure.bytes();
  }

  size_t workspace_bytes() const override { return workspace_bytes_; }
  bool follows_moved_inputs() const override { return true; }  // reads them through tensors
  void set_workspace(std::byte* data) override {
    WorkspaceCarver carver(data);
    carve(carver);
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    if (g_.has_dx) place_weights();
    // Zeroed here, not by each thread: a team smaller than threads_ must not leave stale sums.
    for (auto& s : scratch_) {
      std::fill_n(s->xpad.data, ThreadScratch::xpad_floats(g_), 0.0f);
      std::fill_n(s->dw.data, g_.dw_floats(), 0.0f);
      std::fill_n(s->db, kLanes, 0.0f);
    }
#pragma omp parallel num_threads(threads_)
    {
      ThreadScratch& s = *scratch_[size_t(omp_get_thread_num())];
#pragma omp for schedule(static)
      for (int64_t n = 0; n < g_.n; ++n) image(n, s);
#pragma omp for schedule(static)
      for (int64_t o = 0; o < g_.o; ++o) reduce_channel(o);
    }
  }

 private:
  int64_t placed_floats() const {
    return g_.has_dx ? g_.o * kWindow * g_.kh * vectors(g_.region()) * kLanes : 0;
  }
  void carve(WorkspaceCarver& c) {
    for (const auto& s : scratch_) s->carve(g_, c);
    placed_.data = c.take<float>(placed_floats());
  }

  // placed_[o][b][kh][:] = w[o, :, kh, :] as a run of KW·C floats starting b·C floats in: the
  // weights a winner in window column b adds to a dx row. The other lanes are zero.
  void place_weights() {
    std::fill_n(placed_.data, placed_floats(), 0.0f);
    const int64_t rv = vectors(g_.region());
    const float* w = w_.data<float>();
    for (int64_t o = 0; o < g_.o; ++o)
      for (int64_t c = 0; c < g_.c; ++c)
        for (int64_t kh = 0; kh < g_.kh; ++kh) {
          float* left = placed_.data + (o * kWindow * g_.kh + kh) * rv * kLanes + c;
          float* right = left + g_.kh * rv * kLanes + g_.c;
          const float* taps = w + ((o * g_.c + c) * g_.kh + kh) * g_.kw;
          for (int64_t kw = 0; kw < g_.kw; ++kw) left[kw * g_.c] = right[kw * g_.c] = taps[kw];
        }
  }

  void image(int64_t n, ThreadScratch& s) const {
    const int64_t row = g_.row(), pixels = g_.w * g_.c;
    const float* x = x_.data<float>() + n * g_.h * pixels;
    for (int64_t h = 0; h < g_.h; ++h) {
      std::memcpy(s.xpad.data + (h + g_.ph) * row + g_.pw * g_.c, x + h * pixels,
                  size_t(pixels) * sizeof(float));
    }
    const bool recorded = r_.dtype() == DType::u8;
    const ImageInputs in{dyp_.data<float>() + n * dyp_.strides()[0],
                         dyp_.strides()[1],
                         dyp_.strides()[2],
                         dyp_.strides()[3],
                         recorded ? nullptr : r_.data<float>() + n * g_.oh * g_.ow * g_.o,
                         recorded ? r_.data<uint8_t>() + n * g_.windows() * g_.o : nullptr};
    if (single_fn_ != nullptr) {
      single_fn_(g_, tables_, in, s);
      return;
    }
    find_all_winners(g_, in, s);
    weight_fn_(g_, s);
    if (!g_.has_dx) return;
    std::fill_n(s.dxpad.data, g_.padded_h() * row, 0.0f);
    data_fn_(g_, placed_.data, s);
    float* dx = dx_.data<float>() + n * g_.h * pixels;
    for (int64_t h = 0; h < g_.h; ++h) {
      std::memcpy(dx + h * pixels, s.dxpad.data + (h + g_.ph) * row + g_.pw * g_.c,
                  size_t(pixels) * sizeof(float));
    }
  }

  // dw[o] and db[o]: the threads' sums added in thread order.
  void reduce_channel(int64_t o) {
    const int64_t stride = vectors(g_.lanes()) * kLanes;
    float* dw = dw_.data<float>() + o * g_.c * g_.kh * g_.kw;
    for (int64_t kh = 0; kh < g_.kh; ++kh) {
      for (int64_t kw = 0; kw < g_.kw; ++kw) {
        for (int64_t c = 0; c < g_.c; ++c) {
          // Lanes (kw, o) with one input channel, (kw, c) per output channel otherwise.
          const int64_t at = g_.single_channel() ? kh * stride + kw * g_.o + o
                                                 : (o * g_.kh + kh) * stride + kw * g_.c + c;
          float sum = 0.0f;
          for (int t = 0; t < threads_; ++t) sum += scratch_[size_t(t)]->dw.data[at];
          dw[(c * g_.kh + kh) * g_.kw + kw] = sum;
        }
      }
    }
    if (g_.has_db) {
      double sum = 0.0;
      for (int t = 0; t < threads_; ++t) sum += double(scratch_[size_t(t)]->db[o]);
      db_.data<float>()[o] = float(sum);
    }
  }

  Geometry g_;
  Tensor dyp_, r_, x_, w_, dw_, db_, dx_;
  int threads_;
  Tables tables_;
  ScratchArray<float> placed_;
  SingleChannelFn single_fn_;
  WeightGradientFn weight_fn_;
  DataGradientFn data_fn_;
  std::vector<std::unique_ptr<ThreadScratch>> scratch_;
  size_t workspace_bytes_ = 0;
};

}  // namespace

bool pooled_conv_grad_fits(const Shape& x, const Shape& w, const ops::ConvAttrs& conv,
                           bool has_dx) {
  return fits(x, w, conv, has_dx);
}

bool can_run_pooled_conv_grad(const Node& node, std::span<const Tensor> inputs,
                              std::span<const Tensor> outputs) {
  return geometry(node, inputs, outputs).has_value();
}

std::shared_ptr<SpecialKernel> make_pooled_conv_grad_kernel(const Node& node,
                                                            std::span<const Tensor> inputs,
                                                            std::span<const Tensor> outputs) {
  std::optional<Geometry> g = geometry(node, inputs, outputs);
  if (!g) {
    std::string operands;
    for (const Tensor& t : inputs) {
      operands += ' ';
      operands += t.defined() ? describe(t) : std::string("-");
    }
    throw Error(node_label(node) + ": operands" + operands + " cannot run the fused kernel");
  }
  return std::make_shared<PooledConvGrad>(*g, inputs, outputs);
}

#else  // the baseline variant: the pass never fuses (pooled_conv_grad_fits() is false)

bool pooled_conv_grad_fits(const Shape&, const Shape&, const ops::ConvAttrs&, bool) {
  return false;
}

bool can_run_pooled_conv_grad(const Node&, std::span<const Tensor>, std::span<const Tensor>) {
  return false;
}

std::shared_ptr<SpecialKernel> make_pooled_conv_grad_kernel(const Node& node,
                                                            std::span<const Tensor>,
                                                            std::span<const Tensor>) {
  throw Error(node_label(node) + ": runs only where the AVX-512 kernels do");
}

#endif

}  // namespace kiln::graph::KILN_ISA
KILN_ISA_TARGET_END

#if KILN_ISA_DISPATCH
namespace kiln::graph {

KILN_ISA_DECLARE(bool pooled_conv_grad_fits(const Shape& x, const Shape& w,
                                            const ops::ConvAttrs& conv, bool has_dx))
KILN_ISA_DECLARE(bool can_run_pooled_conv_grad(const Node& node, std::span<const Tensor> inputs,
                                               std::span<const Tensor> outputs))
KILN_ISA_DECLARE(std::shared_ptr<SpecialKernel> make_pooled_conv_grad_kernel(
    const Node& node, std::span<const Tensor> inputs, std::span<const Tensor> outputs))

bool pooled_conv_grad_fits(const Shape& x, const Shape& w, const ops::ConvAttrs& conv,
                           bool has_dx) {
  return KILN_ISA_CALL(pooled_conv_grad_fits, x, w, conv, has_dx);
}
bool can_run_pooled_conv_grad(const Node& node, std::span<const Tensor> inputs,
                              std::span<const Tensor> outputs) {
  return KILN_ISA_CALL(can_run_pooled_conv_grad, node, inputs, outputs);
}
std::shared_ptr<SpecialKernel> make_pooled_conv_grad_kernel(const Node& node,
                                                            std::span<const Tensor> inputs,
                                                            std::span<const Tensor> outputs) {
  return KILN_ISA_CALL(make_pooled_conv_grad_kernel, node, inputs, outputs);
}

}  // namespace kiln::graph
#endif
