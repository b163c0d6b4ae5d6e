#include "kiln/graph/autodiff.h"

#include "graph_test_util.h"

namespace kiln::graph::autodiff_test {
namespace {
using namespace testing;

// Graph autodiff of loss(params, x) must equal autograd::grad of the same function.
void expect_grads_match(const std::function<Tensor(const std::vector<Tensor>&, const Tensor&)>& f,
                        std::vector<Tensor> params, const Tensor& x) {
  autograd::install_tape();
  for (Tensor& p : params) p.set_requires_grad(true);
  std::vector<Tensor> eager = autograd::grad(f(params, x), params);
  Graph g;
  {
    Tracer tracer(g);
    tracer.bind_state(numbered("p", params));
    Tensor tx = tracer.input(ops::meta_of(x), "x");
    std::vector<Tensor> grads = gradients(tracer, f(params, tx), params);
    for (const Tensor& gr : grads) tracer.add_output(gr);
    tracer.finish();
  }
  for (bool optimize : {false, true}) {
    Executable exe(g, {.optimize = optimize});
    expect_all_close(exe.run(std::vector<Tensor>{x}), eager, 1e-5, 1e-5, "gradients");
  }
}

TEST(GraphAutodiff, BroadcastingArithmetic) {
  expect_grads_match(
      [](const std::vector<Tensor>& p, const Tensor& x) {
        Tensor y = ops::div(ops::mul(x, p[0]), ops::add_scalar(ops::square(p[1]), 1.0));
        return ops::sum(ops::sub(y, ops::exp(ops::mul(x, p[1]))));
      },
      {random_tensor({3}, 1), random_tensor({1, 3}, 2)}, random_tensor({4, 3}, 3));
}

TEST(GraphAutodiff, MlpWithCrossEntropy) {
  std::vector<Tensor> p = mlp_params(6, 5, 3, 4);
  Tensor labels = random_labels(4, 3, 9);
  expect_grads_match(
      [&](const std::vector<Tensor>& ps, const Tensor& x) { return mlp_loss(ps, x, labels); }, p,
      random_tensor({4, 6}, 5));
}

TEST(GraphAutodiff, ParameterUsedTwiceAccumulates) {
  expect_grads_match(
      [](const std::vector<Tensor>& p, const Tensor& x) {
        return ops::sum(ops::add(ops::mul(x, p[0]), ops::tanh(ops::mul(p[0], p[0]))));
      },
      {random_tensor({5}, 1)}, random_tensor({5}, 2));
}

TEST(GraphAutodiff, UnusedParameterGetsZeros) {
  expect_grads_match(
      [](const std::vector<Tensor>& p, const Tensor& x) { return ops::sum(ops::mul(x, p[0])); },
      {random_tensor({3}, 1), random_tensor({2}, 2)}, random_tensor({3}, 3));
}

TEST(GraphAutodiff, ConvBatchNormPool) {
  Tensor w = random_tensor({4, 2, 3, 3}, 1, -0.5f, 0.5f), bias = random_tensor({4}, 2);
  Tensor gamma = random_tensor({4}, 3, 0.5f, 1.5f), beta = random_tensor({4}, 4);
  expect_grads_match(
      [](const std::vector<Tensor>& p, const Tensor& x) {
        Tensor rm = Tensor::zeros({4}), rv = Tensor::ones({4});
        Tensor c = ops::conv2d(x, p[0], p[1], {.padding = {1, 1}});
        Tensor b = ops::batch_norm(c, p[2], p[3], rm, rv, true, 0.9, 1e-5)[0];
        Tensor y = ops::max_pool2d(ops::relu(b), {});
        return ops::mean(ops::square(y));
      },
      {w, bias, gamma, beta}, random_tensor({2, 2, 6, 6}, 5));
}

TEST(GraphAutodiff, LossMustBeAScalar) {
  Graph g;
  Tracer tracer(g);
  Tensor p = random_tensor({3}, 1);
  tracer.bind_state({{"p", p}});
  Tensor x = tracer.input({Shape{3}, DType::f32}, "x");
  EXPECT_THROW(gradients(tracer, ops::mul(x, p), {p}), Error);
}

// Loss scaling seeds the backward with a state scalar: the gradients are d(loss)/d(p) times the
// seed's value at run time, not at trace time (a new scale must not need a recompile).
TEST(GraphAutodiff, SeedIsReadEveryRun) {
  autograd::install_tape();
  std::vector<Tensor> p = mlp_params(6, 5, 3, 4);
  for (Tensor& t : p) t.set_requires_grad(true);
  Tensor labels = random_labels(4, 3, 9), x = random_tensor({4, 6}, 5);
  Tensor seed = Tensor::scalar(1.0);
  Graph g;
  {
    Tracer tracer(g);
    tracer.bind_state(numbered("p", p, {{"seed", seed}}));
    Tensor tx = tracer.input(ops::meta_of(x), "x");
    for (const Tensor& gr : gradients(tracer, mlp_loss(p, tx, labels), p, seed)) {
      tracer.add_output(gr);
    }
    tracer.finish();
  }
  Executable exe(g, {.fusion = true});
  for (double scale : {1024.0, 3.0}) {
    *seed.data<float>() = float(scale);
    std::vector<Tensor> eager = autograd::grad(mlp_loss(p, x, labels), p, Tensor::scalar(scale));
    expect_all_close(exe.run(std::vector<Tensor>{x}), eager, 1e-5, 1e-4, "seeded gradients");
  }
}

TEST(GraphAutodiff, SeedMustMatchTheLoss) {
  Graph g;
  Tracer tracer(g);
  Tensor p = random_tensor({3}, 1);
  tracer.bind_state({{"p", p}});
  Tensor x = tracer.input({Shape{3}, DType::f32}, "x");
  Tensor loss = ops::sum(ops::mul(x, p));
  EXPECT_THROW(gradients(tracer, loss, {p}, Tensor::zeros({2})), ShapeError);
  EXPECT_THROW(gradients(tracer, loss, {p}, Tensor::scalar(1.0, DType::f16)), ShapeError);
}

}  // namespace
}  // namespace kiln::graph::autodiff_test
