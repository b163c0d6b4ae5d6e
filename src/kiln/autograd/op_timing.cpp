#include "kiln/autograd/op_timing.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <limits>
#include <random>

#include "kiln/autograd/tape.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"

namespace kiln::autograd {
namespace {

// Random values in [-1, 1] from a private engine: the model's own generator must not advance,
// or measuring would change what a run with the same seed trains.
// Kernels choose by memory order too (a channels-last pooling is another implementation), so the
// tensor has the meta's.
Tensor random_tensor(const ops::TensorMeta& meta, std::mt19937& engine) {
  const bool channels_last = meta.layout == ops::Layout::channels_last && meta.shape.rank() == 4;
  const Strides strides =
      channels_last ? channels_last_strides(meta.shape) : contiguous_strides(meta.shape);
  Tensor t = Tensor::empty_strided(meta.shape, strides, meta.dtype);
  if (!is_floating(meta.dtype)) {
    std::memset(t.raw_data(), 0, size_t(t.numel()) * dtype_size(meta.dtype));
    return t;
  }
  Tensor values = Tensor::empty_strided(meta.shape, strides, DType::f32);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  float* p = values.data<float>();  // every element once, in memory order
  for (int64_t i = 0; i < values.numel(); ++i) p[i] = dist(engine);
  if (meta.dtype == DType::f32) return values;
  return ops::cast(values, meta.dtype);
}

// d(output) = 1 in the output's memory order: a seed in another order would time a conversion.
Tensor ones_like(const Tensor& t) {
  const bool channels_last = t.is_channels_last() && !t.is_contiguous();
  Tensor f = channels_last
                 ? Tensor::empty_strided(t.shape(), channels_last_strides(t.shape()), DType::f32)
                 : Tensor::empty(t.shape(), DType::f32);
  std::fill_n(f.data<float>(), f.numel(), 1.f);
  return t.dtype() == DType::f32 ? f : ops::cast(f, t.dtype());
}

double clock_ms(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// A run this long varies little from one repeat to the next: timing it again would only cost the
// caller (a planner timing a ResNet-50's every convolution) its time.
constexpr double kLongRunMs = 20;

// The fastest of `repeats` runs (one when a run is long) on `threads` kernel threads. On one
// thread that is the thread's CPU time: the machine may be shared, and wall time on a busy one
// measures the other processes more than the kernel. Several threads' kernels wait at barriers
// for each other, which only wall time counts.
template <class F>
double fastest_ms(int repeats, int threads, F&& run) {
  const ScopedThreadBudget budget(threads);
  const clockid_t clock = threads == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
  run();  // first-call costs (oneDNN primitive creation, allocator growth) are not the op's
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeats; ++r) {
    const double t0 = clock_ms(clock);
    run();
    const double ms = clock_ms(clock) - t0;
    best = std::min(best, ms);
    if (ms > kLongRunMs) break;
  }
  return best;
}

// Restores the thread's grad mode on scope exit.
class GradModeScope {
 public:
  explicit GradModeScope(bool on) : previous_(ops::grad_enabled()) { ops::set_grad_enabled(on); }
  ~GradModeScope() { ops::set_grad_enabled(previous_); }

 private:
  bool previous_;
};

}  // namespace

std::string timing_key(const OpTimingQuery& query) {
  std::string key(ops::op_name(query.kind));
  for (size_t i = 0; i < query.inputs.size(); ++i) {
    const ops::TensorMeta& m = query.inputs[i];
    key += ' ';
    key += dtype_name(m.dtype);
    key += m.shape.str();
    if (m.layout == ops::Layout::channels_last) key += "nhwc";
    if (i < 32 && (query.differentiable >> i & 1)) key += '\'';
  }
  return key + '#' + std::to_string(ops::hash_attrs(query.attrs));
}

std::optional<double> time_op_ms(const OpTimingQuery& query, int repeats, int threads) {
  const ops::OpDef& def = ops::op_def(query.kind);
  std::mt19937 engine(12345);
  std::vector<Tensor> inputs, differentiated;
  bool backward = false;
  for (size_t i = 0; i < query.inputs.size(); ++i) {
    inputs.push_back(random_tensor(query.inputs[i], engine));
    const bool wants_grad = i < 32 && def.grad != nullptr && (query.differentiable >> i & 1) &&
                            !(def.mutated_inputs >> i & 1) && is_floating(query.inputs[i].dtype);
    if (!wants_grad) continue;
    inputs.back().set_requires_grad(true);
    differentiated.push_back(inputs.back());
    backward = true;
  }
  if (backward) install_tape();
  GradModeScope grad_mode(backward);
  try {
    Tensor seed;  // made in the untimed run
    return fastest_ms(repeats, std::max(1, threads), [&] {
      std::vector<Tensor> outputs = ops::call(query.kind, inputs, query.attrs);
      if (backward && outputs[0].requires_grad()) {
        if (!seed.defined()) seed = ones_like(outputs[0]);
        grad(outputs[0], differentiated, seed);
      }
    });
  } catch (const Error&) {
    return std::nullopt;  // no kernel for these dtypes or shapes here
  }
}

}  // namespace kiln::autograd
