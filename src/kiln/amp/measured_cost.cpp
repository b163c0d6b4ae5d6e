#include "kiln/amp/measured_cost.h"

#include <algorithm>
#include <ctime>
#include <limits>
#include <random>

#include "kiln/autograd/tape.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"

namespace kiln::amp {
namespace {

std::string query_key(const OpQuery& q) {
  std::string key(ops::op_name(q.kind));
  for (const ops::TensorMeta& m : q.inputs) {
    key += ' ';
    key += dtype_name(m.dtype);
    key += m.shape.str();
  }
  return key + '#' + std::to_string(ops::hash_attrs(q.attrs));
}

// Random values in [-1, 1] from a private engine: the model's own generator must not advance,
// or measuring would change what a run with the same seed trains.
Tensor random_tensor(const ops::TensorMeta& meta, std::mt19937& engine) {
  Tensor t = Tensor::empty(meta.shape, DType::f32);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(engine);
  return meta.dtype == DType::f32 ? t : ops::cast(t, meta.dtype);
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// The fastest of `repeats` runs, in CPU time on one kernel thread: the machine may be shared,
// and wall time on a busy one measures the other processes (threads waiting at a barrier for a
// descheduled peer) more than the kernel. The ratio of two kernels' work is what the placement
// needs, and it holds at any thread count the kernels scale to alike.
template <class F>
double fastest_ms(int repeats, F&& run) {
  const int threads = num_threads();
  set_num_threads(1);
  struct Restore {
    int threads;
    ~Restore() { set_num_threads(threads); }
  } restore{threads};
  run();  // first-call costs (oneDNN primitive creation, allocator growth) are not the op's
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeats; ++r) {
    const double t0 = thread_cpu_ms();
    run();
    best = std::min(best, thread_cpu_ms() - t0);
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

std::optional<double> MeasuredCostModel::op_ms(const OpQuery& query) {
  const std::string key = query_key(query);
  {
    std::lock_guard lock(mutex_);
    if (auto it = op_cache_.find(key); it != op_cache_.end()) return it->second;
  }
  std::optional<double> ms = measure(query);
  std::lock_guard lock(mutex_);
  op_cache_.emplace(key, ms);
  return ms;
}

std::optional<double> MeasuredCostModel::measure(const OpQuery& query) const {
  const ops::OpDef& def = ops::op_def(query.kind);
  // Ops that write their inputs, and ops on integer data (labels, indices), are not timed on
  // random values: their placement stays MindSpore's.
  if (def.mutated_inputs != 0) return std::nullopt;
  for (const ops::TensorMeta& m : query.inputs) {
    if (!is_floating(m.dtype)) return std::nullopt;
  }
  std::mt19937 engine(12345);
  std::vector<Tensor> inputs;
  for (const ops::TensorMeta& m : query.inputs) inputs.push_back(random_tensor(m, engine));
  const bool backward = def.grad != nullptr;
  if (backward) {
    autograd::install_tape();
    for (Tensor& t : inputs) t.set_requires_grad(true);
  }
  GradModeScope grad_mode(backward);
  try {
    return fastest_ms(repeats_, [&] {
      std::vector<Tensor> outputs = ops::call(query.kind, inputs, query.attrs);
      if (backward && outputs[0].requires_grad()) {
        autograd::grad(outputs[0], inputs, Tensor::ones(outputs[0].shape(), outputs[0].dtype()));
      }
    });
  } catch (const Error&) {
    return std::nullopt;  // no kernel for this dtype here: keep MindSpore's placement
  }
}

double MeasuredCostModel::cast_ms(int64_t numel, DType from, DType to) {
  const std::string key =
      std::to_string(numel) + std::string(dtype_name(from)) + ">" + std::string(dtype_name(to));
  {
    std::lock_guard lock(mutex_);
    if (auto it = cast_cache_.find(key); it != cast_cache_.end()) return it->second;
  }
  std::mt19937 engine(12345);
  const Tensor x = random_tensor({Shape{numel}, from}, engine);
  GradModeScope no_grad(false);
  const double ms = fastest_ms(repeats_, [&] { ops::cast(x, to); });
  std::lock_guard lock(mutex_);
  cast_cache_.emplace(key, ms);
  return ms;
}

std::shared_ptr<CostModel> measured_cost_model() {
  static const std::shared_ptr<CostModel> model = std::make_shared<MeasuredCostModel>();
  return model;
}

}  // namespace kiln::amp
