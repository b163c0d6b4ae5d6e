#pragma once
// One op (or a short chain) under SEMI_AUTO_PARALLEL on the job's ranks, forward and backward,
// against the unsharded op run eagerly in this process: the op's inputs are bound as parameters
// (so each rank holds only its block and gets a gradient of it), the loss is sum(op(...) * R)
// for a fixed R, and the sharded output, loss and gathered gradients must equal the whole op's
// (and inputs without a gradient that the op updates in place, their updated values).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/autograd/tape.h"
#include "kiln/comm/communicator.h"
#include "kiln/core/parallel_context.h"
#include "kiln/core/random.h"
#include "kiln/graph/autodiff.h"
#include "kiln/graph/executor.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/shard_rule.h"
#include "kiln/parallel/semi_auto.h"

namespace kiln::semi_auto_testing {

using ops::OpKind;
using ops::Strategy;

inline int64_t N() {
  return comm::size();
}

inline Tensor random_f32(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = gen.uniform(-1.f, 1.f);
  return t;
}

inline Tensor indices(int64_t n, int64_t below, uint64_t seed) {
  Generator gen(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = int32_t(gen.uniform(0.f, float(below) - 0.01f));
  return Tensor::from_vector(v, Shape({n}));
}

// The whole tensor from this rank's block of it under `layout` (eager collectives).
inline Tensor whole_of(const Tensor& local, const parallel::TensorLayout* layout) {
  if (!layout) return local;
  const parallel::TensorLayout target =
      parallel::TensorLayout::replicated(layout->shape, layout->ranks());
  return parallel::apply_redistribution(
      local, parallel::plan_redistribution(*layout, target, comm::rank(), local.dtype()));
}

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

inline void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = ops::cast(got, DType::f32).to_vector<float>();
  const std::vector<float> w = ops::cast(want, DType::f32).to_vector<float>();
  const double scale = 1.0 + max_abs(w);
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], 1e-5 * scale)
        << what << " element " << i << " on rank " << comm::rank() << " of " << N();
  }
}

// The op under test: called on the inputs inside the strategies' scopes.
using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;
struct Scoped {
  OpKind kind;
  Strategy strategy;
};

// Returns the plan's text (this rank's redistributions), for checks of what was inserted.
inline std::string check_sharded(const std::vector<Tensor>& whole_inputs, const OpFn& op,
                                 const std::vector<Scoped>& strategies, const std::string& what,
                                 const std::vector<size_t>& without_gradient = {}) {
  SCOPED_TRACE(what);
  autograd::install_tape();
  // The reference: the whole op, eagerly, and the gradients of sum(op * R).
  std::vector<Tensor> ref_inputs, ref_float;
  auto differentiable = [&](size_t i) {
    return is_floating(whole_inputs[i].dtype()) &&
           std::find(without_gradient.begin(), without_gradient.end(), i) == without_gradient.end();
  };
  for (size_t i = 0; i < whole_inputs.size(); ++i) {
    Tensor c = whole_inputs[i].clone();
    if (differentiable(i)) {
      c.set_requires_grad(true);
      ref_float.push_back(c);
    }
    ref_inputs.push_back(c);
  }
  const Tensor ref_out = op(ref_inputs);
  const Tensor r = random_f32(ref_out.shape(), 99);
  const Tensor ref_loss = ops::sum(ops::mul(ref_out, r));
  const std::vector<Tensor> ref_grads = autograd::grad(ref_loss, ref_float);

  // The same under SEMI_AUTO_PARALLEL on this job's ranks.
  set_auto_parallel_context(
      {.parallel_mode = ParallelMode::SEMI_AUTO_PARALLEL, .device_num = int(N())});
  std::vector<nn::NamedTensor> params;
  std::vector<Tensor> floats;
  for (size_t i = 0; i < whole_inputs.size(); ++i) {
    Tensor c = whole_inputs[i].clone();
    params.emplace_back("input" + std::to_string(i), c);
    if (differentiable(i)) floats.push_back(c);
  }
  const ops::TensorMeta unused{Shape({1}), DType::f32};
  auto forward = [&](const Tensor&, const Tensor&) {
    Tensor out;
    {
      // The strategies cover the op under test, not the loss after it.
      std::vector<std::unique_ptr<ops::ShardScope>> scopes;
      for (const Scoped& s : strategies) {
        scopes.push_back(std::make_unique<ops::ShardScope>(s.kind, s.strategy));
      }
      std::vector<Tensor> in;
      for (const auto& p : params) in.push_back(p.second);
      out = op(in);
    }
    return std::pair{out, ops::sum(ops::mul(out, r))};
  };
  std::unique_ptr<parallel::LogicalStep> step =
      parallel::plan_step(unused, unused, forward, params, {}, floats);
  graph::Graph g;
  {
    graph::Tracer tracer(g);
    tracer.bind_state(params);
    const Tensor x = tracer.input(unused, "images");
    const Tensor y = tracer.input(unused, "labels");
    auto [out, loss] = parallel::trace_local_step(tracer, *step, x, y, true);
    std::vector<Tensor> grads =
        graph::gradients(tracer, loss, floats, parallel::backward_seed(loss));
    grads = parallel::reduce_replicated_gradients(grads, floats);
    tracer.add_output(out);
    tracer.add_output(loss);
    for (const Tensor& gr : grads) tracer.add_output(gr);
    tracer.finish();
  }
  graph::Executable exe(std::move(g), graph::CompileOptions{});
  const Tensor dummy = Tensor::zeros(Shape({1}));
  const std::vector<Tensor> inputs{dummy, dummy};
  const std::vector<Tensor> got = exe.run(inputs);
  expect_close(got[0], ref_out, "output");
  expect_close(got[1], ref_loss, "loss");
  for (size_t i = 0; i < floats.size(); ++i) {
    expect_close(whole_of(got[2 + i], parallel::sharded_layout(floats[i])), ref_grads[i],
                 "gradient " + std::to_string(i));
  }
  // Inputs the op updates in place (running statistics) end alike, gathered.
  for (size_t i : without_gradient) {
    expect_close(parallel::gather_whole(params[i].second), ref_inputs[i],
                 "input " + std::to_string(i) + " after the step");
  }
  EXPECT_NE(step->plan_text.find("your strategy"), std::string::npos) << step->plan_text;
  parallel::forget_sharded_parameters();
  reset_auto_parallel_context();
  return step->plan_text;
}

}  // namespace kiln::semi_auto_testing
