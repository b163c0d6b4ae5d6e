// MobileNetV2's convolutions one by one: for each inverted residual of the net at a batch and
// image size, its 3x3 depthwise convolution (groups = channels) and its 1x1 convolutions,
// forward + backward data + backward weights, in channels-last (eager mode, and graph mode
// without the blocked layout) and in oneDNN's blocked nChw16c (graph mode with fusion on an
// AVX-512 CPU). Prints per layer kind the time, the FLOPs and GFLOP/s, so the depthwise
// convolutions' share of the time can be read against their share of the work.
//   kiln_depthwise_conv_bench [batch 32] [image 32] [rounds 5]
// Rounds alternate the layouts; each figure is the median of the rounds. CPU time per call.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "kiln/core/random.h"
#include "kiln/ops/dispatch.h"

using namespace kiln;

namespace {

struct Layer {
  int64_t in, out, size, stride, groups;  // a 3x3 when groups > 1, else a 1x1
};

// The convolutions of MobileNetV2's inverted residuals (models/mobilenet_v2.h) at `image`
// (below 64: the small-image strides).
std::vector<Layer> mobilenet_v2_layers(int64_t image) {
  const bool small = image < 64;
  const int64_t stages[][4] = {{1, 16, 1, 1}, {6, 24, 2, small ? 1 : 2},
                               {6, 32, 3, 2}, {6, 64, 4, 2},
                               {6, 96, 3, 1}, {6, 160, 3, 2},
                               {6, 320, 1, 1}};
  std::vector<Layer> layers;
  int64_t channels = 32, size = small ? image : (image + 1) / 2;
  for (const auto& [t, c, n, s] : stages) {
    for (int64_t b = 0; b < n; ++b) {
      const int64_t stride = b == 0 ? s : 1, hidden = channels * t;
      if (t != 1) layers.push_back({channels, hidden, size, 1, 1});
      layers.push_back({hidden, hidden, size, stride, hidden});
      size = (size + stride - 1) / stride;
      layers.push_back({hidden, c, size, 1, 1});
      channels = c;
    }
  }
  return layers;
}

Tensor random_channels_last(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty_strided(shape, channels_last_strides(shape), DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = gen.uniform(-1.f, 1.f);
  return t;
}

double cpu_seconds() {
  return double(std::clock()) / CLOCKS_PER_SEC;
}

// Forward, backward data and backward weights of one layer, CPU seconds per round of `calls`.
double time_layer(const Layer& l, int64_t batch, bool blocked, int calls) {
  const int64_t k = l.groups > 1 ? 3 : 1, p = k / 2;
  const int64_t out_size = (l.size + 2 * p - k) / l.stride + 1;
  const Tensor x = random_channels_last({batch, l.in, l.size, l.size}, 1);
  const Tensor w = random_channels_last({l.out, l.in / l.groups, k, k}, 2).contiguous();
  const Tensor dy = random_channels_last({batch, l.out, out_size, out_size}, 3);
  // The blocked layout needs whole blocks of 16 channels (passes/block_layout.cpp).
  const bool can_block = blocked && l.in % 16 == 0 && l.out % 16 == 0;
  const uint32_t bits = can_block ? 1u | (1u << ops::kNchw16cOutputBit) : 0u;
  ops::ConvAttrs fwd{.stride = {l.stride, l.stride}, .padding = {p, p}, .groups = l.groups};
  fwd.nchw16c = bits;
  ops::ConvAttrs data = fwd, weights = fwd;
  data.shape = x.shape().dims();
  weights.shape = w.shape().dims();
  weights.nchw16c = can_block ? 3u : 0u;
  const double start = cpu_seconds();
  for (int i = 0; i < calls; ++i) {
    ops::call(ops::OpKind::conv2d, {x, w}, fwd);
    ops::call(ops::OpKind::conv2d_backward_data, {dy, w}, data);
    ops::call(ops::OpKind::conv2d_backward_weights, {dy, x}, weights);
  }
  return (cpu_seconds() - start) / calls;
}

double layer_flops(const Layer& l, int64_t batch) {
  const int64_t k = l.groups > 1 ? 3 : 1;
  const int64_t out_size = (l.size + 2 * (k / 2) - k) / l.stride + 1;
  // Three convolutions' worth: forward, backward data, backward weights.
  return 3.0 * 2.0 * double(batch * l.out * out_size * out_size) * double(l.in / l.groups * k * k);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 32;
  const int64_t image = argc > 2 ? std::atoll(argv[2]) : 32;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  const std::vector<Layer> layers = mobilenet_v2_layers(image);
  // Per layout, per kind (0: depthwise 3x3, 1: 1x1), the seconds of each round.
  std::vector<double> seconds[2][2];
  double flops[2] = {0, 0};
  for (const Layer& l : layers) flops[l.groups > 1 ? 0 : 1] += layer_flops(l, batch);
  for (const Layer& l : layers) time_layer(l, batch, true, 1), time_layer(l, batch, false, 1);
  for (int r = 0; r < rounds; ++r) {
    for (int blocked = 0; blocked < 2; ++blocked) {
      double kind[2] = {0, 0};
      for (const Layer& l : layers) kind[l.groups > 1 ? 0 : 1] += time_layer(l, batch, blocked, 3);
      seconds[blocked][0].push_back(kind[0]);
      seconds[blocked][1].push_back(kind[1]);
    }
  }
  std::printf(
      "MobileNetV2 convolutions, batch %lld, %lldx%lld images, forward + backward data + "
      "backward weights, CPU ms per step (median of %d rounds)\n",
      static_cast<long long>(batch), static_cast<long long>(image), static_cast<long long>(image),
      rounds);
  std::printf("%-16s %-14s %10s %10s %9s %12s\n", "layout", "convolutions", "ms", "GFLOP",
              "GFLOP/s", "share of ms");
  for (int blocked = 0; blocked < 2; ++blocked) {
    const double dw = median(seconds[blocked][0]), pw = median(seconds[blocked][1]);
    const char* layout = blocked ? "nChw16c" : "channels-last";
    const char* names[2] = {"depthwise 3x3", "1x1"};
    const double t[2] = {dw, pw};
    for (int kind = 0; kind < 2; ++kind) {
      std::printf("%-16s %-14s %10.2f %10.3f %9.2f %11.0f%%\n", layout, names[kind], t[kind] * 1e3,
                  flops[kind] / 1e9, flops[kind] / t[kind] / 1e9, 100.0 * t[kind] / (dw + pw));
    }
  }
  return 0;
}
