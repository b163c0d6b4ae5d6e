#include "kiln/nn/initializer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>

#include "kiln/core/error.h"
#include "kiln/core/random.h"

namespace kiln::nn {
namespace {

// One initializer defined by a per-tensor fill function; keeps each rule to a few lines.
class FnInitializer : public Initializer {
 public:
  FnInitializer(std::string name, std::function<void(Tensor&)> fn)
      : name_(std::move(name)), fn_(std::move(fn)) {}
  void fill(Tensor& t) const override {
    if (t.dtype() != DType::f32 || !t.is_contiguous()) {
      throw Error("initializer " + name_ + ": needs a contiguous f32 tensor, got " + describe(t));
    }
    fn_(t);
  }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  std::function<void(Tensor&)> fn_;
};

double gain_for(const std::string& nonlinearity, double negative_slope) {
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + negative_slope * negative_slope));
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "linear" || nonlinearity == "sigmoid" || nonlinearity == "conv2d") return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  throw Error("initializer: unknown nonlinearity '" + nonlinearity +
              "' (expected leaky_relu, relu, linear, sigmoid, conv2d or tanh)");
}

int64_t fan(const Shape& shape, FanMode mode) {
  return mode == FanMode::fan_in ? fan_in(shape) : fan_out(shape);
}

void fill_uniform(Tensor& t, double lo, double hi) {
  Generator& gen = default_generator();
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.uniform(float(lo), float(hi));
}

void fill_normal(Tensor& t, double mean, double sigma) {
  Generator& gen = default_generator();
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.normal(float(mean), float(sigma));
}

void fill_constant(Tensor& t, double value) {
  float* p = t.data<float>();
  std::fill(p, p + t.numel(), float(value));
}

std::string normalized(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '_') continue;
    out.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

}  // namespace

int64_t fan_in(const Shape& shape) {
  if (shape.rank() == 0) return 1;
  if (shape.rank() == 1) return shape[0];
  int64_t receptive = 1;
  for (int i = 2; i < shape.rank(); ++i) receptive *= shape[i];
  return shape[1] * receptive;
}

int64_t fan_out(const Shape& shape) {
  if (shape.rank() == 0) return 1;
  if (shape.rank() == 1) return shape[0];
  int64_t receptive = 1;
  for (int i = 2; i < shape.rank(); ++i) receptive *= shape[i];
  return shape[0] * receptive;
}

InitializerPtr HeUniform(double negative_slope, FanMode mode, const std::string& nonlinearity) {
  double gain = gain_for(nonlinearity, negative_slope);
  return std::make_shared<FnInitializer>("HeUniform", [=](Tensor& t) {
    double bound = gain * std::sqrt(3.0 / double(std::max<int64_t>(fan(t.shape(), mode), 1)));
    fill_uniform(t, -bound, bound);
  });
}

InitializerPtr HeNormal(double negative_slope, FanMode mode, const std::string& nonlinearity) {
  double gain = gain_for(nonlinearity, negative_slope);
  return std::make_shared<FnInitializer>("HeNormal", [=](Tensor& t) {
    double sigma = gain / std::sqrt(double(std::max<int64_t>(fan(t.shape(), mode), 1)));
    fill_normal(t, 0.0, sigma);
  });
}

InitializerPtr Normal(double sigma, double mean) {
  return std::make_shared<FnInitializer>("Normal", [=](Tensor& t) { fill_normal(t, mean, sigma); });
}

InitializerPtr Uniform(double scale) {
  return std::make_shared<FnInitializer>("Uniform",
                                         [=](Tensor& t) { fill_uniform(t, -scale, scale); });
}

InitializerPtr XavierUniform(double gain) {
  return std::make_shared<FnInitializer>("XavierUniform", [=](Tensor& t) {
    double fans = double(std::max<int64_t>(fan_in(t.shape()) + fan_out(t.shape()), 1));
    double bound = gain * std::sqrt(6.0 / fans);
    fill_uniform(t, -bound, bound);
  });
}

InitializerPtr Zero() {
  return std::make_shared<FnInitializer>("Zero", [](Tensor& t) { fill_constant(t, 0.0); });
}

InitializerPtr One() {
  return std::make_shared<FnInitializer>("One", [](Tensor& t) { fill_constant(t, 1.0); });
}

InitializerPtr Constant(double value) {
  return std::make_shared<FnInitializer>("Constant", [=](Tensor& t) { fill_constant(t, value); });
}

InitializerPtr TruncatedNormal(double sigma, double mean) {
  return std::make_shared<FnInitializer>("TruncatedNormal", [=](Tensor& t) {
    Generator& gen = default_generator();
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      float v;
      do {
        v = gen.normal(0.f, 1.f);
      } while (v < -2.f || v > 2.f);
      p[i] = float(mean + sigma * v);
    }
  });
}

InitializerPtr initializer_by_name(const std::string& name) {
  std::string n = normalized(name);
  if (n == "heuniform") return HeUniform();
  if (n == "henormal") return HeNormal();
  if (n == "normal") return Normal();
  if (n == "uniform") return Uniform();
  if (n == "xavieruniform") return XavierUniform();
  if (n == "zero" || n == "zeros") return Zero();
  if (n == "one" || n == "ones") return One();
  if (n == "truncatednormal") return TruncatedNormal();
  throw Error("unknown initializer '" + name +
              "' (expected he_uniform, he_normal, normal, uniform, xavier_uniform, zeros, ones "
              "or truncated_normal)");
}

Tensor initializer(const InitializerPtr& init, const Shape& shape) {
  if (!init) throw Error("initializer: no initializer given for shape " + shape.str());
  Tensor t = Tensor::empty(shape, DType::f32);
  init->fill(t);
  return t;
}

}  // namespace kiln::nn
