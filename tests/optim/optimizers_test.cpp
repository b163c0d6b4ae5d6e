// Optimizers against their update formulas, written out here in double precision: MindSpore's
// forms, and PyTorch's for Adam / AdamW / Nesterov momentum.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/core/error.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/momentum.h"
#include "kiln/optim/sgd.h"

namespace kiln::optim::optimizers_test {
namespace {

using Values = std::vector<double>;

Values random_values(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  Values v(n);
  for (double& x : v) x = d(gen);
  return v;
}

Tensor tensor_of(const Values& v, const Shape& shape) {
  return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape);
}

Values values_of(const Tensor& t) {
  auto f = t.to_vector<float>();
  return Values(f.begin(), f.end());
}

void expect_near_all(const Values& actual, const Values& expected, double tol, const char* what) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tol * (1 + std::abs(expected[i]))) << what << " at " << i;
  }
}

// A parameter big enough to take the parallel path (n >= 1<<16) and a small one.
const std::vector<Shape> kShapes = {Shape{3, 5}, Shape{70000}};

// Runs `steps` steps of `opt` on param p with gradients grads[step], checking against ref.
template <class Make, class Reference>
void check_optimizer(Make make, Reference reference, int steps, double tol) {
  for (const Shape& shape : kShapes) {
    size_t n = size_t(shape.numel());
    Values p = random_values(n, 1);
    Tensor param = tensor_of(p, shape);
    auto opt = make(std::vector<Tensor>{param});
    for (int s = 0; s < steps; ++s) {
      // |g| >= 0.1: near g = 0 Adam's eps placement (ours vs PyTorch's) dominates, by design.
      Values g = random_values(n, 100 + uint64_t(s), 0.1, 2);
      Values sign = random_values(n, 200 + uint64_t(s));
      for (size_t i = 0; i < n; ++i) g[i] = sign[i] < 0 ? -g[i] : g[i];
      opt->prepare_step();
      opt->apply({tensor_of(g, shape)});
      opt->advance();
      reference(p, g, s);
    }
    expect_near_all(values_of(param), p, tol, "parameter");
    EXPECT_EQ(opt->global_step(), steps);
  }
}

TEST(SGD, MatchesFormulaWithWeightDecayAndSchedule) {
  const double wd = 0.1;
  auto lr = [](int64_t s) { return 0.1 / double(s + 1); };
  check_optimizer([&](std::vector<Tensor> ps) { return std::make_unique<SGD>(ps, lr, wd); },
                  [&](Values& p, const Values& g, int s) {
                    for (size_t i = 0; i < p.size(); ++i) p[i] -= lr(s) * (g[i] + wd * p[i]);
                  },
                  4, 1e-5);
}

TEST(Momentum, MatchesApplyMomentum) {
  Values v;
  const double lr = 0.05, mu = 0.9, wd = 1e-3;
  check_optimizer(
      [&](std::vector<Tensor> ps) {
        v.assign(size_t(ps[0].numel()), 0.0);
        return std::make_unique<Momentum>(ps, constant_lr(lr),
                                          MomentumOptions{.momentum = mu, .weight_decay = wd});
      },
      [&](Values& p, const Values& g, int) {
        for (size_t i = 0; i < p.size(); ++i) {
          double gi = g[i] + wd * p[i];
          v[i] = mu * v[i] + gi;
          p[i] -= lr * v[i];
        }
      },
      5, 1e-5);
}

// PyTorch SGD(momentum, nesterov=True, dampening=0): buf = mu*buf + g; g = g + mu*buf;
// p -= lr*g.
TEST(Momentum, NesterovMatchesPyTorch) {
  Values buf;
  const double lr = 0.05, mu = 0.9, wd = 1e-2;
  check_optimizer(
      [&](std::vector<Tensor> ps) {
        buf.assign(size_t(ps[0].numel()), 0.0);
        return std::make_unique<Momentum>(
            ps, constant_lr(lr),
            MomentumOptions{.momentum = mu, .weight_decay = wd, .nesterov = true});
      },
      [&](Values& p, const Values& grad, int) {
        for (size_t i = 0; i < p.size(); ++i) {
          double g = grad[i] + wd * p[i];
          buf[i] = mu * buf[i] + g;
          p[i] -= lr * (g + mu * buf[i]);
        }
      },
      5, 1e-5);
}

// MindSpore's Adam: lr_t = lr*sqrt(1-b2^t)/(1-b1^t); p -= lr_t*m/(sqrt(v)+eps).
TEST(Adam, MatchesMindSporeFormulaExactly) {
  Values m, v;
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-3;  // large eps: placement matters
  check_optimizer(
      [&](std::vector<Tensor> ps) {
        m.assign(size_t(ps[0].numel()), 0.0);
        v.assign(size_t(ps[0].numel()), 0.0);
        return std::make_unique<Adam>(ps, constant_lr(lr),
                                      AdamOptions{.beta1 = b1, .beta2 = b2, .eps = eps});
      },
      [&](Values& p, const Values& g, int s) {
        double t = s + 1;
        double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
        for (size_t i = 0; i < p.size(); ++i) {
          m[i] = b1 * m[i] + (1 - b1) * g[i];
          v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
          p[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
        }
      },
      6, 1e-5);
}

// torch.optim.Adam(weight_decay=wd): g += wd*p; m, v as usual;
// p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps). With PyTorch's default eps the two forms agree.
TEST(Adam, MatchesPyTorchFormulaWithL2) {
  Values m, v;
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.05;
  check_optimizer(
      [&](std::vector<Tensor> ps) {
        m.assign(size_t(ps[0].numel()), 0.0);
        v.assign(size_t(ps[0].numel()), 0.0);
        return std::make_unique<Adam>(ps, constant_lr(lr), AdamOptions{.weight_decay = wd});
      },
      [&](Values& p, const Values& grad, int s) {
        double t = s + 1, bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
        for (size_t i = 0; i < p.size(); ++i) {
          double g = grad[i] + wd * p[i];
          m[i] = b1 * m[i] + (1 - b1) * g;
          v[i] = b2 * v[i] + (1 - b2) * g * g;
          p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
        }
      },
      6, 2e-5);
}

// torch.optim.AdamW: p *= 1 - lr*wd; then the Adam step on the raw gradient.
TEST(AdamW, MatchesPyTorchFormula) {
  Values m, v;
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  auto sched = [&](int64_t s) { return lr * (1.0 - 0.1 * double(s)); };
  check_optimizer(
      [&](std::vector<Tensor> ps) {
        m.assign(size_t(ps[0].numel()), 0.0);
        v.assign(size_t(ps[0].numel()), 0.0);
        return std::make_unique<AdamW>(ps, sched, AdamOptions{.weight_decay = wd});
      },
      [&](Values& p, const Values& g, int s) {
        double t = s + 1, bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
        double lr_s = sched(s);
        for (size_t i = 0; i < p.size(); ++i) {
          p[i] *= 1 - lr_s * wd;
          m[i] = b1 * m[i] + (1 - b1) * g[i];
          v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
          p[i] -= lr_s / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
        }
      },
      6, 2e-5);
}

TEST(Optimizer, StepUsesGradAndZeroGradClearsIt) {
  Tensor p = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  p.set_requires_grad(true);
  p.set_grad(Tensor::from_vector(std::vector<float>{2, -2}, {2}));
  SGD opt({p}, constant_lr(0.5));
  opt.step();
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0, 3}));
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
  opt.step();  // no gradient: treated as zero
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0, 3}));
}

TEST(Optimizer, BadGradientsAreNamed) {
  Tensor p = Tensor::zeros({2, 3});
  Momentum opt({p}, constant_lr(0.1));
  opt.prepare_step();
  try {
    opt.apply({Tensor::zeros({3, 2})});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("Momentum: gradient 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(opt.apply({}), Error);
  EXPECT_THROW(Adam({p}, constant_lr(0.1), AdamOptions{.beta1 = 1.0}), Error);
  EXPECT_THROW(SGD({p}, constant_lr(0.1), -1.0), Error);
}

TEST(Optimizer, StateRoundTripsThroughLoadState) {
  Tensor p = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  Adam a({p}, constant_lr(0.1));
  for (int i = 0; i < 3; ++i) {
    a.prepare_step();
    a.apply({Tensor::from_vector(std::vector<float>{1, -1, 0.5}, {3})});
    a.advance();
  }
  auto state = a.state_and_names();
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state[0].first, "moment1.0");
  EXPECT_EQ(state[2].first, "global_step");

  Tensor q = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  Adam b({q}, constant_lr(0.1));
  b.load_state(state);
  EXPECT_EQ(b.global_step(), 3);
  EXPECT_EQ(b.state_and_names()[1].second.to_vector<float>(), state[1].second.to_vector<float>());

  std::vector<nn::NamedTensor> missing(state.begin(), state.begin() + 1);
  try {
    b.load_state(missing);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moment2.0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::optim::optimizers_test
