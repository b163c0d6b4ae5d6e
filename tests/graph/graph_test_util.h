#pragma once
// Small hand-built networks (ops only, no nn/) for graph tests, and helpers to run one training
// step eagerly (autograd tape + sgd_update) or compiled (tracer + graph autodiff + executor).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/autograd/tape.h"
#include "kiln/graph/autodiff.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/tracer.h"
#include "kiln/ops/functional.h"

namespace kiln::graph::testing {

inline Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = dist(gen);
  return Tensor::from_vector(v, shape);
}

// A channels-last copy of t (the layout the compiled step's activations have).
inline Tensor channels_last(const Tensor& t) {
  Tensor out = Tensor::empty_strided(t.shape(), channels_last_strides(t.shape()), t.dtype());
  out.copy_from(t);
  return out;
}

inline Tensor random_labels(int64_t n, int64_t classes, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = int32_t(gen() % uint64_t(classes));
  return Tensor::from_vector(v, Shape{n});
}

// loss = f(params, x, labels)
using LossFn = std::function<Tensor(const std::vector<Tensor>&, const Tensor&, const Tensor&)>;

inline std::vector<Tensor> clone_all(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) {
    Tensor c = t.clone();
    c.set_requires_grad(true);
    out.push_back(c);
  }
  return out;
}

// One eager SGD step; returns the loss.
inline float eager_step(const LossFn& f, std::vector<Tensor>& params, const Tensor& x,
                        const Tensor& labels, const Tensor& lr) {
  autograd::install_tape();
  Tensor loss = f(params, x, labels);
  std::vector<Tensor> grads = autograd::grad(loss, params);
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) ops::sgd_update(params[i], grads[i], lr, 0.0);
  return loss.item<float>();
}

// Tensors named prefix0, prefix1, … for Tracer::bind_state, appended to `state`.
inline std::vector<std::pair<std::string, Tensor>> numbered(
    const std::string& prefix, const std::vector<Tensor>& tensors,
    std::vector<std::pair<std::string, Tensor>> state = {}) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    state.emplace_back(prefix + std::to_string(i), tensors[i]);
  }
  return state;
}

// Traces forward + loss + backward + SGD update of `params` into one graph. The params are step
// state p0, p1, … after `state` (other step state: BatchNorm running statistics, say); `loss`
// gets the graph's inputs, traced from `inputs` (name, example) in order.
inline Graph trace_sgd_step(const std::function<Tensor(const std::vector<Tensor>&)>& loss,
                            std::vector<Tensor>& params,
                            const std::vector<std::pair<std::string, Tensor>>& inputs,
                            const Tensor& lr,
                            std::vector<std::pair<std::string, Tensor>> state = {}) {
  Graph g;
  {
    Tracer tracer(g);
    tracer.bind_state(numbered("p", params, std::move(state)));
    std::vector<Tensor> traced;
    for (const auto& [name, example] : inputs)
      traced.push_back(tracer.input(ops::meta_of(example), name));
    Tensor l = loss(traced);
    std::vector<Tensor> grads = gradients(tracer, l, params);
    for (size_t i = 0; i < params.size(); ++i) ops::sgd_update(params[i], grads[i], lr, 0.0);
    tracer.add_output(l);
    tracer.finish();
  }
  return g;
}

// trace_sgd_step of f(params, x, labels).
inline Graph trace_step(const LossFn& f, std::vector<Tensor>& params, const Tensor& x,
                        const Tensor& labels, const Tensor& lr) {
  return trace_sgd_step([&](const std::vector<Tensor>& in) { return f(params, in[0], in[1]); },
                        params, {{"x", x}, {"labels", labels}}, lr);
}

// As trace_step, with momentum SGD (μ = 0.9); the velocities and the lr are step state too.
inline Graph trace_momentum_step(const LossFn& f, std::vector<Tensor>& params,
                                 std::vector<Tensor>& velocities, const Tensor& x,
                                 const Tensor& labels, const Tensor& lr, double weight_decay,
                                 bool nesterov) {
  Graph g;
  {
    Tracer tracer(g);
    tracer.bind_state(numbered("p", params, numbered("v", velocities, {{"lr", lr}})));
    Tensor tx = tracer.input(ops::meta_of(x), "x");
    Tensor tl = tracer.input(ops::meta_of(labels), "labels");
    Tensor loss = f(params, tx, tl);
    std::vector<Tensor> grads = gradients(tracer, loss, params);
    for (size_t i = 0; i < params.size(); ++i) {
      ops::momentum_update(params[i], grads[i], velocities[i], lr, 0.9, weight_decay, nesterov);
    }
    tracer.add_output(loss);
    tracer.finish();
  }
  return g;
}

inline void expect_all_close(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                             double atol, double rtol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<float> x = a[i].to_vector<float>(), y = b[i].to_vector<float>();
    ASSERT_EQ(x.size(), y.size()) << what << " tensor " << i;
    for (size_t k = 0; k < x.size(); ++k) {
      ASSERT_NEAR(x[k], y[k], atol + rtol * std::abs(y[k]))
          << what << " tensor " << i << " at " << k;
    }
  }
}

// Two-layer perceptron with bias and relu: the smallest net that has every kind of node
// (matmul, broadcast add, relu, loss, updates).
inline Tensor mlp_loss(const std::vector<Tensor>& p, const Tensor& x, const Tensor& labels) {
  Tensor h = ops::relu(ops::add(ops::matmul(x, p[0], false, true), p[1]));
  Tensor logits = ops::add(ops::matmul(h, p[2], false, true), p[3]);
  return ops::softmax_cross_entropy(logits, labels);
}

inline std::vector<Tensor> mlp_params(int64_t in, int64_t hidden, int64_t out, uint64_t seed) {
  return clone_all({random_tensor({hidden, in}, seed, -0.3f, 0.3f),
                    random_tensor({hidden}, seed + 1, -0.1f, 0.1f),
                    random_tensor({out, hidden}, seed + 2, -0.3f, 0.3f),
                    random_tensor({out}, seed + 3, -0.1f, 0.1f)});
}

// LeNet's shape, small: conv 5×5 (padding 2) -> relu -> 2×2 max pool, conv 5×5 -> relu -> 2×2
// max pool, and a dense layer with bias, for x [N, C, 20, 20] and 10 classes.
inline Tensor conv_net_loss(const std::vector<Tensor>& p, const Tensor& x, const Tensor& labels) {
  const ops::Pool2dOptions pool;
  Tensor h = ops::max_pool2d(ops::relu(ops::conv2d(x, p[0], p[1], {.padding = {2, 2}})), pool);
  h = ops::max_pool2d(ops::relu(ops::conv2d(h, p[2], p[3], {})), pool);
  Tensor logits = ops::add(ops::matmul(ops::flatten(h), p[4], false, true), p[5]);
  return ops::softmax_cross_entropy(logits, labels);
}

inline std::vector<Tensor> conv_net_params(int64_t channels) {
  return clone_all({random_tensor({6, channels, 5, 5}, 1, -0.3f, 0.3f), random_tensor({6}, 2),
                    random_tensor({16, 6, 5, 5}, 3, -0.2f, 0.2f), random_tensor({16}, 4),
                    random_tensor({10, 16 * 3 * 3}, 5, -0.2f, 0.2f), random_tensor({10}, 6)});
}

// Counts live nodes of a type (or, for NodeType::op, of an op).
inline int count_nodes(const Graph& g, NodeType type, int op = -1) {
  int n = 0;
  for (NodeId id : g.schedule()) {
    const Node& node = g.node(id);
    if (node.type == type && (op < 0 || int(node.op) == op)) ++n;
  }
  return n;
}

// Traces fn over graph inputs shaped like `inputs`, compiles with `options`, runs once.
using GraphFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
struct Compiled {
  std::unique_ptr<Executable> exe;
  std::vector<Tensor> outputs;
};
inline Graph trace(const GraphFn& fn, const std::vector<Tensor>& inputs) {
  Graph g;
  Tracer tracer(g);
  std::vector<Tensor> symbolic;
  for (size_t i = 0; i < inputs.size(); ++i) {
    symbolic.push_back(tracer.input(ops::meta_of(inputs[i]), "in" + std::to_string(i)));
  }
  for (const Tensor& t : fn(symbolic)) tracer.add_output(t);
  tracer.finish();
  return g;
}
inline Compiled compile_and_run(const GraphFn& fn, const std::vector<Tensor>& inputs,
                                const CompileOptions& options) {
  Compiled c;
  c.exe = std::make_unique<Executable>(trace(fn, inputs), options);
  c.outputs = c.exe->run(inputs);
  return c;
}
// fn compiled with fusion on must give what it gives eagerly and with fusion off.
inline Compiled expect_fused_matches(const GraphFn& fn, const std::vector<Tensor>& inputs,
                                     double atol = 1e-5, double rtol = 1e-5) {
  std::vector<Tensor> eager = fn(inputs);
  Compiled plain = compile_and_run(fn, inputs, {.fusion = false});
  Compiled fused = compile_and_run(fn, inputs, {.fusion = true});
  expect_all_close(plain.outputs, eager, atol, rtol, "unfused vs eager");
  expect_all_close(fused.outputs, plain.outputs, atol, rtol, "fused vs unfused");
  return fused;
}

}  // namespace kiln::graph::testing
