#include "kiln/parallel/machine_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "kiln/core/tensor.h"
#include "kiln/ops/dispatch_chain.h"
#include "kiln/ops/functional.h"

namespace kiln::parallel {
namespace {

// The best of `runs` timings of f, in seconds (the first run warms caches and primitives).
template <typename F>
double best_seconds(int runs, F&& f) {
  f();
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

double MachineModel::op_seconds(const ops::Cost& cost) const {
  return std::max(cost.flops / flops_per_s, cost.bytes / bytes_per_s) + launch_s;
}

MachineModel measure_compute(MachineModel base) {
  ops::NoGradGuard no_grad;
  constexpr int64_t n = 512;
  const Tensor a = Tensor::full({n, n}, 0.5), b = Tensor::full({n, n}, 0.25);
  const double matmul_s = best_seconds(5, [&] { ops::matmul(a, b); });
  constexpr int64_t elements = int64_t(4) << 20;  // 16 MiB of f32 per operand
  const Tensor x = Tensor::full({elements}, 1.0), y = Tensor::full({elements}, 2.0);
  const double add_s = best_seconds(5, [&] { ops::add(x, y); });
  base.flops_per_s = 2.0 * double(n * n * n) / matmul_s;
  base.bytes_per_s = 3.0 * 4.0 * double(elements) / add_s;
  char text[160];
  std::snprintf(text, sizeof text, "measured: %.1f GFLOP/s (f32 matmul), %.1f GB/s (add)",
                base.flops_per_s / 1e9, base.bytes_per_s / 1e9);
  base.compute_source = text;
  return base;
}

}  // namespace kiln::parallel
