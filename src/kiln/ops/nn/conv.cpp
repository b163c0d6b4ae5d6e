// 2-D convolution and its two backward ops on oneDNN. Activations are channels-last (logical
// NCHW, NHWC in memory): that is the layout oneDNN's fast CPU kernels read directly, so outputs
// are produced in it and inputs arriving in another layout are converted once at the edge.
//
// Weights stay OIHW in Kiln tensors. oneDNN's optimized kernels want them blocked: given plain
// OIHW weights it falls back to its reference kernel (measured: 2.5 s vs 12 ms for a ResNet-20
// 16->16 conv at batch 128, f32), so each call copies the weights into the layout the
// primitive picked (`format_tag::any`): a BlockedCopy for small weights, a reorder primitive for
// large ones (ops/dnnl/blocked_copy.h says why). Either costs a few µs against a conv of 100s
// of µs.
#include "kiln/core/context.h"
#include "kiln/ops/detail/conv_col2im.h"
#include "kiln/ops/detail/nn_common.h"
#include "kiln/ops/dnnl/blocked_copy.h"
#include "kiln/ops/kernels/conv_single_channel.h"
#include "kiln/ops/kernels/conv_single_channel_avx2.h"
#include "kiln/ops/kernels/conv_winograd.h"
#include "kiln/ops/kernels/reduce.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using namespace dnnl_util;
using nn::throw_shape_error;
using nn::window_out;

constexpr char kConv[] = "conv2d", kConvBwdData[] = "conv2d_backward_data",
               kConvBwdWeights[] = "conv2d_backward_weights";

struct ConvGeom {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups;
};

// Validates x_shape/w_shape/attrs for op `op` and returns the geometry.
ConvGeom conv_geom(std::string_view op, const Shape& x, const Shape& w, const ConvAttrs& a,
                   std::span<const TensorMeta> in) {
  if (x.rank() != 4) throw_shape_error(op, "input must be [N, C, H, W], got " + x.str(), in);
  if (w.rank() != 4)
    throw_shape_error(op, "weight must be [O, C/groups, KH, KW], got " + w.str(), in);
  if (a.groups < 1)
    throw_shape_error(op, detail::concat("groups must be >= 1, got ", a.groups), in);
  for (int i = 0; i < 2; ++i) {
    if (a.stride[i] < 1 || a.dilation[i] < 1 || a.padding[i] < 0) {
      throw_shape_error(op,
                        detail::concat("bad stride/padding/dilation (", a.stride[0], ",",
                                       a.stride[1], ")/(", a.padding[0], ",", a.padding[1], ")/(",
                                       a.dilation[0], ",", a.dilation[1], ")"),
                        in);
    }
  }
  ConvGeom g{x[0], x[1], x[2], x[3], w[0], w[2], w[3], 0, 0, a.groups};
  if (g.c % g.groups != 0 || g.o % g.groups != 0) {
    throw_shape_error(
        op,
        detail::concat("channels in ", g.c, " and out ", g.o, " must divide by groups ", g.groups),
        in);
  }
  if (w[1] * g.groups != g.c) {
    throw_shape_error(op,
                      detail::concat("input has ", g.c, " channels but weight ", w.str(),
                                     " expects ", w[1] * g.groups, " (groups ", g.groups, ")"),
                      in);
  }
  g.oh = window_out(g.h, g.kh, a.stride[0], a.padding[0], a.dilation[0]);
  g.ow = window_out(g.w, g.kw, a.stride[1], a.padding[1], a.dilation[1]);
  if (g.oh < 1 || g.ow < 1) {
    throw_shape_error(op,
                      detail::concat("kernel ", g.kh, "x", g.kw, " (dilation ", a.dilation[0], "x",
                                     a.dilation[1], ") does not fit input ", g.h, "x", g.w,
                                     " padded by ", a.padding[0], "x", a.padding[1]),
                      in);
  }
  return g;
}

Shape out_shape(const ConvGeom& g) {
  return Shape{g.n, g.o, g.oh, g.ow};
}

dnnl::memory::desc weights_desc(const ConvGeom& g, DType dtype, bool any) {
  dt d = data_type(dtype, kConv);
  if (g.groups == 1)
    return dnnl::memory::desc({g.o, g.c, g.kh, g.kw}, d, any ? tag::any : tag::oihw);
  return dnnl::memory::desc({g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}, d,
                            any ? tag::any : tag::goihw);
}

struct WindowArgs {
  dims strides, dilates, padding;
};
WindowArgs window_args(const ConvAttrs& a) {
  return {{a.stride[0], a.stride[1]},
          {a.dilation[0] - 1, a.dilation[1] - 1},  // oneDNN counts dilation from 0
          {a.padding[0], a.padding[1]}};
}

// The primitive depends on Context::conv_algorithm too (Winograd or direct).
int64_t conv_algorithm_setting() {
  const std::string& algorithm = get_context().conv_algorithm;
  return algorithm == "direct" ? 1 : algorithm == "winograd" ? 2 : 0;
}

void add_conv_key(PrimitiveKey& key, const ConvGeom& g, const ConvAttrs& a) {
  key.add(g.groups).add(int64_t(a.nchw16c)).add(conv_algorithm_setting());
  for (int i = 0; i < 2; ++i) key.add(a.stride[i]).add(a.padding[i]).add(a.dilation[i]);
}

dnnl::convolution_forward::primitive_desc forward_pd(const dnnl::memory::desc& src,
                                                     const dnnl::memory::desc& wei,
                                                     const dnnl::memory::desc* bias,
                                                     const dnnl::memory::desc& dst,
                                                     const ConvAttrs& a, dnnl::algorithm alg) {
  WindowArgs w = window_args(a);
  auto desc =
      bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wei,
                                             *bias, dst, w.strides, w.dilates, w.padding, w.padding)
           : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wei, dst,
                                             w.strides, w.dilates, w.padding, w.padding);
  return conv_forward_pd(desc, scratchpad_attr(), src, wei);
}

// Winograd F(4x4, 3x3) where winograd_conv() says so. oneDNN 2.6 offers it (jit_wino_4x3) only
// on its blocked nChw16c layout, so those activations are staged through blocked buffers with a
// reorder on each side. Measured on this machine at batch 128, 2 threads, reorders included —
// 64->64 at 7x7: forward 1.23 -> 0.95 ms, backward-data 1.30 -> 0.99, backward-weights 1.24 ->
// 1.06; at 8x8 1.52/1.80/1.64 -> 0.95/0.95/1.05. At 32 channels the reorders eat the gain
// (14x14: 1.20/1.39/1.14 -> 1.27/1.36/1.35), at 16 Winograd is slower outright. (16 and 32
// channels run Kiln's own F(4x4, 3x3) instead, kernels/conv_winograd.h.) Its rounding differs
// from the direct kernel's (still f32 accuracy); eager and graph mode run the same one.
struct ConvAlgorithm {
  dnnl::algorithm alg = dnnl::algorithm::convolution_direct;
  dnnl::memory::desc src, dst;  // activations as the primitive reads/writes them
};

// Graph mode can keep activations in the blocked layout between ops (ConvAttrs::nchw16c, see
// graph/passes/block_layout.cpp). Such a convolution runs every activation blocked (one that
// arrives channels-last is staged), and without reorders around it Winograd pays off from 32
// channels: 32->32 at 14x14, batch 128, activations already blocked, cold cache, ms —
// direct channels-last 1.32/1.43/1.34 (forward/backward-data/backward-weights), direct blocked
// 1.22/1.30/1.29, Winograd blocked 1.22/1.21/1.18; 64->64 at 7x7: 1.32/1.44/1.36 channels-last,
// 0.92/0.91/1.02 Winograd blocked.
bool runs_blocked(const ConvAttrs& a) {
  return a.nchw16c != 0;
}

dnnl::memory::desc blocked_desc(const dnnl::memory::desc& md) {
  return dnnl::memory::desc(md.dims(), md.data_type(), tag::nChw16c);
}

// How activation `t` is laid out in memory: channels-last as its strides say, or blocked where
// graph mode says so. In a blocked convolution a channels-last tensor of 16 channels is
// described as blocked too: with one block of 16 the two layouts are the same bytes.
dnnl::memory::desc activation_desc(const Tensor& t, bool is_blocked, const ConvAttrs& a,
                                   std::string_view op) {
  dnnl::memory::desc md = desc_of(t, op);
  if (is_blocked || (runs_blocked(a) && t.dim(1) == 16 && t.is_channels_last())) {
    return blocked_desc(md);
  }
  return md;
}

ConvAlgorithm choose_algorithm(const ConvGeom& g, const ConvAttrs& a, DType dtype,
                               const dnnl::memory::desc& src, const dnnl::memory::desc& wei,
                               const dnnl::memory::desc* bias, const dnnl::memory::desc& dst) {
  if (runs_blocked(a)) {
    ConvAlgorithm blocked{dnnl::algorithm::convolution_direct,
                          g.c % 16 == 0 ? blocked_desc(src) : src,
                          g.o % 16 == 0 ? blocked_desc(dst) : dst};
    const Shape x_shape{g.n, g.c, g.h, g.w}, w_shape{g.o, g.c, g.kh, g.kw};
    if (dnnl_winograd_fits(dtype, x_shape, w_shape, a) &&
        dnnl_winograd_chosen(x_shape, w_shape, 32)) {
      try {
        forward_pd(blocked.src, wei, bias, blocked.dst, a, dnnl::algorithm::convolution_winograd);
        blocked.alg = dnnl::algorithm::convolution_winograd;
      } catch (const dnnl::error&) {
        // Declined for this shape: direct it is.
      }
    }
    return blocked;
  }
  if (winograd_conv(dtype, Shape{g.n, g.c, g.h, g.w}, Shape{g.o, g.c, g.kh, g.kw}, a)) {
    ConvAlgorithm wino{dnnl::algorithm::convolution_winograd,
                       dnnl::memory::desc(src.dims(), src.data_type(), tag::nChw16c),
                       dnnl::memory::desc(dst.dims(), dst.data_type(), tag::nChw16c)};
    try {
      forward_pd(wino.src, wei, bias, wino.dst, a, wino.alg);
      return wino;
    } catch (const dnnl::error&) {
      // Declined for this shape (e.g. padding it does not handle): direct it is.
    }
  }
  return {dnnl::algorithm::convolution_direct, src, dst};
}

// A reorder between two layouts of the same data (weights, or activations staged for Winograd).
PrimitiveRunner reorder_runner(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  dnnl::reorder::primitive_desc pd(engine(), from, engine(), to, scratchpad_attr());
  PrimitiveRunner r(dnnl::reorder(pd), pd);
  r.arg(DNNL_ARG_FROM, from);
  r.arg(DNNL_ARG_TO, to);
  return r;
}

// An activation the primitive reads or writes in a layout of its own: staged through a buffer,
// reordered into it before the run (inputs) or out of it after (outputs).
struct StagedArg {
  int arg;
  bool is_input;
  PrimitiveRunner reorder;
  size_t bytes;
};

struct ConvPrim {
  PrimitiveRunner conv;
  bool weights_staged = false;  // in another layout than the tensor's: weight_copy or weights
  std::optional<BlockedCopy> weight_copy;  // user layout <-> primitive layout, or else:
  PrimitiveRunner weights;
  size_t weight_bytes = 0;
  std::vector<StagedArg> staged;

  // Declares that the primitive's weights are `wanted` while the tensor is `user`: read from it
  // (is_input) or written to it.
  void stage_weights_between(const dnnl::memory::desc& user, const dnnl::memory::desc& wanted,
                             bool is_input) {
    if (user == wanted) return;
    weights_staged = true;
    weight_bytes = wanted.get_size();
    weight_copy = BlockedCopy::between(user, wanted);
    if (!weight_copy) {
      weights = is_input ? reorder_runner(user, wanted) : reorder_runner(wanted, user);
    }
  }

  // Declares activation argument `arg`: the tensor is `user`, the primitive wants `wanted`.
  void activation(int arg, const dnnl::memory::desc& user, const dnnl::memory::desc& wanted,
                  bool is_input) {
    conv.arg(arg, wanted);
    if (user == wanted) return;
    staged.push_back({arg, is_input,
                      is_input ? reorder_runner(user, wanted) : reorder_runner(wanted, user),
                      wanted.get_size()});
  }
};

// Scratch tensor for weights or activations in the primitive's layout; from the caching
// allocator.
Tensor staging_buffer(size_t bytes) {
  return Tensor::empty(Shape{int64_t(bytes)}, DType::u8);
}

// The weights in the layout the primitive wants: w itself, or w reordered into `buffer`.
void* weights_for(ConvPrim& p, const Tensor& w, Tensor& buffer) {
  if (!p.weights_staged) return w.raw_data();
  buffer = staging_buffer(p.weight_bytes);
  if (p.weight_copy) {
    p.weight_copy->to_blocked(w.raw_data(), buffer.raw_data());
    return buffer.raw_data();
  }
  p.weights.set(DNNL_ARG_FROM, w.raw_data());
  p.weights.set(DNNL_ARG_TO, buffer.raw_data());
  p.weights.run();
  return buffer.raw_data();
}

// Points the primitive's activation arguments at the tensors' data, staging those it wants in
// another layout, and runs it.
void run_conv(ConvPrim& p, std::initializer_list<std::pair<int, void*>> activations) {
  std::vector<Tensor> buffers;
  buffers.reserve(p.staged.size());
  for (auto [arg, data] : activations) {
    auto s = std::find_if(p.staged.begin(), p.staged.end(),
                          [arg = arg](const StagedArg& sa) { return sa.arg == arg; });
    if (s == p.staged.end()) {
      p.conv.set(arg, data);
      continue;
    }
    void* buffer = buffers.emplace_back(staging_buffer(s->bytes)).raw_data();
    s->reorder.set(DNNL_ARG_FROM, s->is_input ? data : buffer);
    s->reorder.set(DNNL_ARG_TO, s->is_input ? buffer : data);
    if (s->is_input) s->reorder.run();
    p.conv.set(arg, buffer);
  }
  p.conv.run();
  for (StagedArg& s : p.staged) {
    if (!s.is_input) s.reorder.run();
  }
}

// ---------------------------------------------------------------------------------- forward

std::vector<TensorMeta> conv_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const ConvAttrs& a = attrs.as<ConvAttrs>();
  if (in.size() != 2 && in.size() != 3) {
    throw_shape_error(kConv,
                      detail::concat("expects 2 or 3 inputs (x, w[, bias]), got ", in.size()), in);
  }
  nn::check_float(kConv, in[0], "input", true, in);
  if (in[1].dtype != in[0].dtype)
    throw_shape_error(kConv, "weight dtype differs from input dtype", in);
  ConvGeom g = conv_geom(kConv, in[0].shape, in[1].shape, a, in);
  if (in.size() == 3) {
    if (in[2].shape != Shape{g.o}) {
      throw_shape_error(kConv, detail::concat("bias must be [", g.o, "], got ", in[2].shape.str()),
                        in);
    }
    if (in[2].dtype != in[0].dtype && in[2].dtype != DType::f32) {
      throw_shape_error(kConv, "bias dtype must be f32 or the input's", in);
    }
  }
  return {{out_shape(g), in[0].dtype, Layout::channels_last}};
}

void conv_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const ConvAttrs& a = attrs.as<ConvAttrs>();
  Tensor x = to_channels_last(in[0]);
  Tensor w = nn::row_major(in[1]);
  bool has_bias = in.size() == 3;
  Tensor bias = has_bias ? nn::row_major(in[2]) : Tensor();
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  // One input channel (grayscale images): a hand-written kernel, up to 2x faster than oneDNN's
  // here (numbers in kernels/conv_single_channel.h).
  if (!runs_blocked(a) && can_run_single_channel_conv(x, w.shape(), a) && y.is_channels_last() &&
      (!has_bias || bias.dtype() == DType::f32)) {
    single_channel_conv_forward(x, w, has_bias ? &bias : nullptr, false, y);
    return;
  }
  // The same without AVX-512 (kernels/conv_single_channel_avx2.h).
  if (!runs_blocked(a) && can_run_single_channel_conv_avx2(x, w.shape(), a, y) &&
      (!has_bias || bias.dtype() == DType::f32)) {
    single_channel_conv_forward_avx2(x, w, has_bias ? &bias : nullptr, a, /*relu=*/false, y);
    return;
  }
  // 16 or 32 channels, 3x3, stride 1: Kiln's Winograd F(4x4, 3x3), faster than any of oneDNN's
  // kernels there (numbers in kernels/conv_winograd.cpp).
  if (can_run_winograd_3x3(x, input_is_nchw16c(a, 0), w.shape(), a, y, output_is_nchw16c(a, 0)) &&
      winograd_3x3_chosen(x.shape(), a) && (!has_bias || bias.dtype() == DType::f32)) {
    winograd_3x3_forward(x, input_is_nchw16c(a, 0), w, has_bias ? &bias : nullptr, a, y,
                         output_is_nchw16c(a, 0));
    return;
  }
  ConvGeom g = conv_geom(kConv, x.shape(), w.shape(), a, {});
  PrimitiveKey key;
  key.add(2).add(x).add(w.shape()).add(has_bias ? int64_t(bias.dtype()) : -1);
  add_conv_key(key, g, a);
  thread_local PrimitiveCache<ConvPrim> cache;
  ConvPrim& p = cache.get(key, [&] {
    auto src = activation_desc(x, input_is_nchw16c(a, 0), a, kConv);
    auto dst = activation_desc(y, output_is_nchw16c(a, 0), a, kConv);
    dnnl::memory::desc bmd;
    if (has_bias) bmd = desc_of(bias, kConv);
    auto wany = weights_desc(g, x.dtype(), true);
    const dnnl::memory::desc* bias_md = has_bias ? &bmd : nullptr;
    ConvAlgorithm alg = choose_algorithm(g, a, x.dtype(), src, wany, bias_md, dst);
    auto pd = forward_pd(alg.src, wany, bias_md, alg.dst, a, alg.alg);
    ConvPrim prim;
    prim.conv = PrimitiveRunner(dnnl::convolution_forward(pd), pd);
    prim.activation(DNNL_ARG_SRC, src, pd.src_desc(), true);
    prim.conv.arg(DNNL_ARG_WEIGHTS, pd.weights_desc());
    prim.activation(DNNL_ARG_DST, dst, pd.dst_desc(), false);
    if (has_bias) prim.conv.arg(DNNL_ARG_BIAS, bmd);
    prim.stage_weights_between(weights_desc(g, x.dtype(), false), pd.weights_desc(), true);
    return prim;
  });
  Tensor wbuf;
  void* weights = weights_for(p, w, wbuf);
  p.conv.set(DNNL_ARG_WEIGHTS, weights);
  if (has_bias) p.conv.set(DNNL_ARG_BIAS, bias.raw_data());
  run_conv(p, {{DNNL_ARG_SRC, x.raw_data()}, {DNNL_ARG_DST, y.raw_data()}});
}

Conv2dOptions options_of(const ConvAttrs& a) {
  return {.stride = a.stride, .padding = a.padding, .dilation = a.dilation, .groups = a.groups};
}

std::vector<Tensor> conv_grad(const GradCtx& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grad_outputs[0];
  Conv2dOptions opt = options_of(c.attrs.as<ConvAttrs>());
  bool has_bias = c.inputs.size() == 3;
  std::vector<Tensor> grads(c.inputs.size());
  if (c.needs_grad[0]) grads[0] = conv2d_backward_data(g, w, c.input_metas[0].shape, opt);
  if (c.needs_grad[1] || (has_bias && c.needs_grad[2])) {
    std::vector<Tensor> gw = conv2d_backward_weights(g, x, c.input_metas[1].shape, has_bias, opt);
    grads[1] = gw[0];
    if (has_bias) {
      // A bias kept in f32 under a bf16 conv gets its gradient in f32.
      grads[2] =
          gw[1].dtype() == c.input_metas[2].dtype ? gw[1] : cast(gw[1], c.input_metas[2].dtype);
    }
  }
  return grads;
}

double conv_flops(const ConvGeom& g) {
  return 2.0 * double(g.n * g.o * g.oh * g.ow) * double(g.c / g.groups * g.kh * g.kw);
}

Cost conv_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out,
               const Attrs& attrs) {
  const ConvAttrs& a = attrs.as<ConvAttrs>();
  ConvGeom g = conv_geom(kConv, in[0].shape, in[1].shape, a, in);
  return {conv_flops(g), nn::bytes_of(in) + nn::bytes_of(out)};
}

// ---------------------------------------------------------------------- backward, data

std::vector<TensorMeta> bwd_data_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const ConvAttrs& a = attrs.as<ConvAttrs>();
  nn::check_float(kConvBwdData, in[0], "grad", true, in);
  if (in[1].dtype != in[0].dtype)
    throw_shape_error(kConvBwdData, "weight dtype differs from grad dtype", in);
  Shape xs(a.shape);
  ConvGeom g = conv_geom(kConvBwdData, xs, in[1].shape, a, in);
  if (in[0].shape != out_shape(g)) {
    throw_shape_error(kConvBwdData,
                      "grad shape " + in[0].shape.str() + " does not match the output " +
                          out_shape(g).str() + " of input " + xs.str(),
                      in);
  }
  return {{xs, in[0].dtype, Layout::channels_last}};
}

// With stride 1, dx is itself a forward convolution: of dy with the weights' channels swapped
// (O <-> C) and taps flipped, padded K - 1 - p. For channels-last f32 3x3 convolutions of 16 to
// 63 channels oneDNN's forward kernel runs that faster than its backward-data kernel does dx:
// batch 128, 2 threads, ms, backward-data vs forward on flipped weights — 16->16 at 28x28 1.60
// vs 1.46, 32->32 at 14x14 1.57 vs 1.36. (From 64 channels both run Winograd, about even; with
// few channels the flipped forward is 1.5-3.5x slower: LeNet's 6->16 5x5 0.19 vs 0.28 ms.)
bool runs_as_flipped_forward(const ConvGeom& g, const ConvAttrs& a, DType dtype) {
  return dtype == DType::f32 && !runs_blocked(a) && g.groups == 1 && g.kh == 3 && g.kw == 3 &&
         a.stride[0] == 1 && a.stride[1] == 1 && a.dilation[0] == 1 && a.dilation[1] == 1 &&
         a.padding[0] <= 2 && a.padding[1] <= 2 && g.c >= 16 && g.o >= 16 && g.c < 64 && g.o < 64;
}

// w [O, C, KH, KW] -> [C, O, KH, KW] with both taps reversed.
Tensor flipped_weights(const Tensor& w) {
  const int64_t o = w.dim(0), c = w.dim(1), kh = w.dim(2), kw = w.dim(3);
  Tensor f = Tensor::empty({c, o, kh, kw}, w.dtype());
  const float* src = w.data<float>();
  float* dst = f.data<float>();
  for (int64_t i = 0; i < o; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      for (int64_t y = 0; y < kh; ++y) {
        for (int64_t x = 0; x < kw; ++x) {
          dst[((j * o + i) * kh + (kh - 1 - y)) * kw + (kw - 1 - x)] =
              src[((i * c + j) * kh + y) * kw + x];
        }
      }
    }
  }
  return f;
}

void bwd_data_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const ConvAttrs& a = attrs.as<ConvAttrs>();
  Tensor dy = to_channels_last(in[0]);
  Tensor w = nn::row_major(in[1]);
  Tensor& dx = out[0];
  if (dx.numel() == 0) return;
  ConvGeom g = conv_geom(kConvBwdData, dx.shape(), w.shape(), a, {});
  if (dy.numel() == 0) {
    std::memset(dx.raw_data(), 0, dx.nbytes());
    return;
  }
  // Few input channels: a GEMM plus a hand-written col2im, faster than oneDNN's kernel there
  // (numbers and the rule in kernels/conv_col2im.h).
  if (!runs_blocked(a) && can_run_gemm_backward_data(dy, w.shape(), dx.shape(), a) &&
      dx.is_channels_last()) {
    gemm_backward_data(dy, w, dx);
    return;
  }
  ConvAttrs flipped =
      a;  // dx as a forward convolution of dy (stride 1: see runs_as_flipped_forward)
  flipped.padding = {g.kh - 1 - a.padding[0], g.kw - 1 - a.padding[1]};
  if (can_run_winograd_3x3(dy, input_is_nchw16c(a, 0), Shape{g.c, g.o, g.kh, g.kw}, flipped, dx,
                           output_is_nchw16c(a, 0)) &&
      winograd_3x3_chosen(dy.shape(), flipped)) {
    winograd_3x3_forward(dy, input_is_nchw16c(a, 0), flipped_weights(w), nullptr, flipped, dx,
                         output_is_nchw16c(a, 0));
    return;
  }
  if (runs_as_flipped_forward(g, a, dy.dtype()) && dx.is_channels_last()) {
    ConvAttrs forward;
    forward.padding = flipped.padding;
    const Tensor args[] = {dy, flipped_weights(w)};
    conv_kernel(args, out, forward);
    return;
  }
  PrimitiveKey key;
  key.add(3).add(dy).add(w.shape()).add(dx);
  add_conv_key(key, g, a);
  thread_local PrimitiveCache<ConvPrim> cache;
  ConvPrim& p = cache.get(key, [&] {
    auto diff_src = activation_desc(dx, output_is_nchw16c(a, 0), a, kConvBwdData);
    auto diff_dst = activation_desc(dy, input_is_nchw16c(a, 0), a, kConvBwdData);
    auto wany = weights_desc(g, dy.dtype(), true);
    ConvAlgorithm alg = choose_algorithm(g, a, dy.dtype(), diff_src, wany, nullptr, diff_dst);
    auto hint = forward_pd(alg.src, wany, nullptr, alg.dst, a, alg.alg);
    WindowArgs wa = window_args(a);
    dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(alg.alg, alg.src, wany, alg.dst, wa.strides,
                                              wa.dilates, wa.padding, wa.padding),
        scratchpad_attr(), engine(), hint);
    ConvPrim prim;
    prim.conv = PrimitiveRunner(dnnl::convolution_backward_data(pd), pd);
    prim.activation(DNNL_ARG_DIFF_DST, diff_dst, pd.diff_dst_desc(), true);
    prim.conv.arg(DNNL_ARG_WEIGHTS, pd.weights_desc());
    prim.activation(DNNL_ARG_DIFF_SRC, diff_src, pd.diff_src_desc(), false);
    prim.stage_weights_between(weights_desc(g, dy.dtype(), false), pd.weights_desc(), true);
    return prim;
  });
  Tensor wbuf;
  void* weights = weights_for(p, w, wbuf);
  p.conv.set(DNNL_ARG_WEIGHTS, weights);
  run_conv(p, {{DNNL_ARG_DIFF_DST, dy.raw_data()}, {DNNL_ARG_DIFF_SRC, dx.raw_data()}});
}

// d(dx)/d(grad) is the forward conv; d(dx)/dw pairs grad with the incoming gradient.
std::vector<Tensor> bwd_data_grad(const GradCtx& c) {
  const Tensor &dy = c.inputs[0], &w = c.inputs[1], &gg = c.grad_outputs[0];
  Conv2dOptions opt = options_of(c.attrs.as<ConvAttrs>());
  std::vector<Tensor> grads(2);
  if (c.needs_grad[0]) grads[0] = conv2d(gg, w, Tensor(), opt);
  if (c.needs_grad[1]) grads[1] = conv2d_backward_weights(dy, gg, w.shape(), false, opt)[0];
  return grads;
}

Cost bwd_data_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out,
                   const Attrs& attrs) {
  const ConvAttrs& a = attrs.as<ConvAttrs>();
  ConvGeom g = conv_geom(kConvBwdData, Shape(a.shape), in[1].shape, a, in);
  return {conv_flops(g), nn::bytes_of(in) + nn::bytes_of(out)};
}

// ------------------------------------------------------------------- backward, weights

// attrs.shape is the weight shape; attrs.bias_grad set (the bias gradient sums over {0, 2, 3})
// sums over) asks for the bias gradient as a second output.
std::vector<TensorMeta> bwd_weights_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const ConvAttrs& a = attrs.as<ConvAttrs>();
  nn::check_float(kConvBwdWeights, in[0], "grad", true, in);
  if (in[1].dtype != in[0].dtype)
    throw_shape_error(kConvBwdWeights, "input dtype differs from grad dtype", in);
  Shape ws(a.shape);
  ConvGeom g = conv_geom(kConvBwdWeights, in[1].shape, ws, a, in);
  if (in[0].shape != out_shape(g)) {
    throw_shape_error(kConvBwdWeights,
                      "grad shape " + in[0].shape.str() + " does not match the output " +
                          out_shape(g).str() + " of input " + in[1].shape.str(),
                      in);
  }
  std::vector<TensorMeta> out{{ws, in[0].dtype, Layout::contiguous}};
  if (a.bias_grad) out.push_back({Shape{g.o}, in[0].dtype, Layout::contiguous});
  return out;
}

// oneDNN 2.6's backward-weights kernels spend 0.06–0.17 ms on the bias gradient whatever the
// shape (2 threads: LeNet's 6-channel conv 0.13 → 0.20 ms with it, ResNet-20's 32-channel 14×14
// 1.09 → 1.26). A separate channel sum of a cache-resident gradient is cheaper (0.015 and 0.096
// ms for those two); past a few MiB it has to stream from memory and the fused sum wins
// (16 channels 28×28 at batch 128, 6.4 MB: 0.22 vs 0.06), hence the size limit.
constexpr size_t kSeparateBiasSumBytes = size_t(4) << 20;

void bwd_weights_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const ConvAttrs& a = attrs.as<ConvAttrs>();
  Tensor dy = to_channels_last(in[0]);
  Tensor x = to_channels_last(in[1]);
  Tensor& dw = out[0];
  // (The separate sum reads dy through its strides: not when it is blocked.)
  const bool separate_bias_sum =
      out.size() == 2 && dy.nbytes() <= kSeparateBiasSumBytes && !input_is_nchw16c(a, 0);
  const bool has_bias = out.size() == 2 && !separate_bias_sum;
  ConvGeom g = conv_geom(kConvBwdWeights, x.shape(), dw.shape(), a, {});
  if (dy.numel() == 0 || x.numel() == 0) {
    for (Tensor& t : out) std::memset(t.raw_data(), 0, t.nbytes());
    return;
  }
  // One input channel: a hand-written kernel that also sums the bias gradient in the same pass.
  if (!runs_blocked(a) &&
      can_run_single_channel_conv(x, dw.shape(), a, /*backward_weights=*/true) &&
      dy.is_channels_last()) {
    single_channel_conv_backward_weights(dy, x, dw, out.size() == 2 ? &out[1] : nullptr);
    return;
  }
  // The same without AVX-512 (kernels/conv_single_channel_avx2.h). Where the AVX-512 kernels run
  // but declined (O a multiple of 16), oneDNN's is the faster.
  if (!runs_blocked(a) && !can_run_single_channel_conv(x, dw.shape(), a) &&
      can_run_single_channel_conv_backward_weights_avx2(dy, x, dw.shape(), a)) {
    single_channel_conv_backward_weights_avx2(dy, x, a, dw, out.size() == 2 ? &out[1] : nullptr);
    return;
  }
  // 16 or 32 channels, 3x3, stride 1: Winograd F(4x4, 3x3) (kernels/conv_winograd.h); a bias
  // gradient is a separate channel sum, which reads dy through its strides (so not blocked).
  if (can_run_winograd_3x3(x, input_is_nchw16c(a, 1), dw.shape(), a, dy, input_is_nchw16c(a, 0)) &&
      winograd_3x3_chosen(x.shape(), a) && (out.size() == 1 || !input_is_nchw16c(a, 0))) {
    winograd_3x3_backward_weights(dy, input_is_nchw16c(a, 0), x, input_is_nchw16c(a, 1), a, dw);
    if (out.size() == 2) {
      reduce_tensor(ReduceKind::sum, dy, {true, false, true, true}, 1.0, out[1]);
    }
    return;
  }
  PrimitiveKey key;
  key.add(4).add(dy).add(x).add(dw.shape()).add(has_bias);
  add_conv_key(key, g, a);
  thread_local PrimitiveCache<ConvPrim> cache;
  ConvPrim& p = cache.get(key, [&] {
    auto src = activation_desc(x, input_is_nchw16c(a, 1), a, kConvBwdWeights);
    auto diff_dst = activation_desc(dy, input_is_nchw16c(a, 0), a, kConvBwdWeights);
    auto wany = weights_desc(g, x.dtype(), true);
    dnnl::memory::desc bmd;
    if (has_bias) bmd = desc_of(out[1], kConvBwdWeights);
    const dnnl::memory::desc* bias_md = has_bias ? &bmd : nullptr;
    ConvAlgorithm alg = choose_algorithm(g, a, x.dtype(), src, wany, bias_md, diff_dst);
    WindowArgs wa = window_args(a);
    auto hint = forward_pd(alg.src, wany, bias_md, alg.dst, a, alg.alg);
    auto desc = has_bias ? dnnl::convolution_backward_weights::desc(alg.alg, alg.src, wany, bmd,
                                                                    alg.dst, wa.strides, wa.dilates,
                                                                    wa.padding, wa.padding)
                         : dnnl::convolution_backward_weights::desc(alg.alg, alg.src, wany, alg.dst,
                                                                    wa.strides, wa.dilates,
                                                                    wa.padding, wa.padding);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, scratchpad_attr(), engine(), hint);
    ConvPrim prim;
    prim.conv = PrimitiveRunner(dnnl::convolution_backward_weights(pd), pd);
    prim.activation(DNNL_ARG_SRC, src, pd.src_desc(), true);
    prim.activation(DNNL_ARG_DIFF_DST, diff_dst, pd.diff_dst_desc(), true);
    prim.conv.arg(DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc());
    if (has_bias) prim.conv.arg(DNNL_ARG_DIFF_BIAS, bmd);
    prim.stage_weights_between(weights_desc(g, x.dtype(), false), pd.diff_weights_desc(), false);
    return prim;
  });
  Tensor wbuf;
  if (p.weights_staged) wbuf = staging_buffer(p.weight_bytes);
  p.conv.set(DNNL_ARG_DIFF_WEIGHTS, p.weights_staged ? wbuf.raw_data() : dw.raw_data());
  if (has_bias) p.conv.set(DNNL_ARG_DIFF_BIAS, out[1].raw_data());
  run_conv(p, {{DNNL_ARG_SRC, x.raw_data()}, {DNNL_ARG_DIFF_DST, dy.raw_data()}});
  if (p.weight_copy) {
    p.weight_copy->to_plain(wbuf.raw_data(), dw.raw_data());
  } else if (p.weights_staged) {
    p.weights.set(DNNL_ARG_FROM, wbuf.raw_data());
    p.weights.set(DNNL_ARG_TO, dw.raw_data());
    p.weights.run();
  }
  if (separate_bias_sum) reduce_tensor(ReduceKind::sum, dy, {true, false, true, true}, 1.0, out[1]);
}

// d(dw)/d(grad) is the forward conv of x with the incoming weight gradient (plus the incoming
// bias gradient as a bias); d(dw)/dx is the data-backward of grad with it.
std::vector<Tensor> bwd_weights_grad(const GradCtx& c) {
  const Tensor &dy = c.inputs[0], &x = c.inputs[1];
  const Tensor& ggw = c.grad_outputs[0];
  Tensor ggb = c.grad_outputs.size() > 1 ? c.grad_outputs[1] : Tensor();
  Conv2dOptions opt = options_of(c.attrs.as<ConvAttrs>());
  std::vector<Tensor> grads(2);
  if (c.needs_grad[0]) grads[0] = conv2d(x, ggw, ggb, opt);
  if (c.needs_grad[1]) grads[1] = conv2d_backward_data(dy, ggw, x.shape(), opt);
  return grads;
}

Cost bwd_weights_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out,
                      const Attrs& attrs) {
  const ConvAttrs& a = attrs.as<ConvAttrs>();
  ConvGeom g = conv_geom(kConvBwdWeights, in[1].shape, Shape(a.shape), a, in);
  return {conv_flops(g), nn::bytes_of(in) + nn::bytes_of(out)};
}

Attrs conv_attrs(const Conv2dOptions& opt) {
  return ConvAttrs{
      .stride = opt.stride, .padding = opt.padding, .dilation = opt.dilation, .groups = opt.groups};
}

}  // namespace

const OpDef op_def_conv2d = {
    .name = kConv,
    .attrs = attrs_kind<ConvAttrs>,
    .num_inputs = -1,  // x, w and an optional bias
    .infer = conv_infer,
    .kernel = conv_kernel,
    .grad = conv_grad,
    .saved_inputs = 0b011,
    .amp = AmpClass::low_precision,
    .f16_kernels = false,
    .cost = conv_cost,
    .shard = &kConv2dShardRule,
};

const OpDef op_def_conv2d_backward_data = {
    .name = kConvBwdData,
    .attrs = attrs_kind<ConvAttrs>,
    .num_inputs = 2,
    .infer = bwd_data_infer,
    .kernel = bwd_data_kernel,
    .grad = bwd_data_grad,
    .saved_inputs = 0b11,
    .amp = AmpClass::low_precision,
    .f16_kernels = false,
    .cost = bwd_data_cost,
    .no_shard_reason =
        "a backward op: the partition splits the forward graph and graph autodiff differentiates "
        "each rank's local graph",
};

const OpDef op_def_conv2d_backward_weights = {
    .name = kConvBwdWeights,
    .attrs = attrs_kind<ConvAttrs>,
    .num_inputs = 2,
    .num_outputs = 2,  // {grad_w, grad_bias}; only grad_w without attrs.bias_grad
    .infer = bwd_weights_infer,
    .kernel = bwd_weights_kernel,
    .grad = bwd_weights_grad,
    .saved_inputs = 0b11,
    .amp = AmpClass::low_precision,
    .f16_kernels = false,
    .cost = bwd_weights_cost,
    .no_shard_reason =
        "a backward op: the partition splits the forward graph and graph autodiff differentiates "
        "each rank's local graph",
};

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt) {
  Attrs a = conv_attrs(opt);
  if (bias.defined()) return call_one_output(OpKind::conv2d, {x, w, bias}, a);
  return call_one_output(OpKind::conv2d, {x, w}, a);
}

Tensor conv2d_backward_data(const Tensor& grad, const Tensor& w, const Shape& x_shape,
                            const Conv2dOptions& opt) {
  Attrs a = conv_attrs(opt);
  a.as<ConvAttrs>().shape = x_shape.dims();
  return call_one_output(OpKind::conv2d_backward_data, {grad, w}, a);
}

std::vector<Tensor> conv2d_backward_weights(const Tensor& grad, const Tensor& x,
                                            const Shape& w_shape, bool has_bias,
                                            const Conv2dOptions& opt) {
  Attrs a = conv_attrs(opt);
  a.as<ConvAttrs>().shape = w_shape.dims();
  a.as<ConvAttrs>().bias_grad = has_bias;
  std::vector<Tensor> out = call(OpKind::conv2d_backward_weights, {grad, x}, a);
  out.resize(2);
  return out;
}

}  // namespace kiln::ops
