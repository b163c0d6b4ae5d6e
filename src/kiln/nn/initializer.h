#pragma once
// Parameter initializers with MindSpore's names and defaults (mindspore.common.initializer).
// All draw from kiln::default_generator(), so kiln::set_seed makes a network reproducible.
//
//   auto w = nn::initializer(nn::HeUniform(), {64, 3, 3, 3});
//   nn::Dense(784, 10, {.weight_init = nn::XavierUniform()});
#include <memory>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::nn {

class Initializer {
 public:
  virtual ~Initializer() = default;
  // Fills a contiguous f32 tensor in place.
  virtual void fill(Tensor& t) const = 0;
  virtual std::string name() const = 0;
};
using InitializerPtr = std::shared_ptr<const Initializer>;

enum class FanMode { fan_in, fan_out };

// fan_in / fan_out as MindSpore and PyTorch compute them: [out, in, k...] -> in*prod(k),
// out*prod(k); a 1-D shape uses its length for both.
int64_t fan_in(const Shape& shape);
int64_t fan_out(const Shape& shape);

// Kaiming uniform: U(-b, b), b = gain * sqrt(3 / fan), gain = sqrt(2 / (1 + negative_slope²))
// (MindSpore's default nonlinearity is leaky_relu; use "relu" for gain sqrt(2)).
InitializerPtr HeUniform(double negative_slope = 0.0, FanMode mode = FanMode::fan_in,
                         const std::string& nonlinearity = "leaky_relu");
// Kaiming normal: N(0, gain / sqrt(fan)).
InitializerPtr HeNormal(double negative_slope = 0.0, FanMode mode = FanMode::fan_in,
                        const std::string& nonlinearity = "leaky_relu");
InitializerPtr Normal(double sigma = 0.01, double mean = 0.0);
InitializerPtr Uniform(double scale = 0.07);  // U(-scale, scale)
// U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
InitializerPtr XavierUniform(double gain = 1.0);
InitializerPtr Zero();
InitializerPtr One();
InitializerPtr Constant(double value);
// N(mean, sigma) redrawn until within mean ± 2 sigma.
InitializerPtr TruncatedNormal(double sigma = 0.01, double mean = 0.0);

// By name, with default arguments: "he_uniform"/"HeUniform", "he_normal", "normal", "uniform",
// "xavier_uniform", "zeros"/"zero", "ones"/"one", "truncated_normal". Throws Error naming an
// unknown name.
InitializerPtr initializer_by_name(const std::string& name);

// A new f32 tensor of `shape` filled by `init`.
Tensor initializer(const InitializerPtr& init, const Shape& shape);

}  // namespace kiln::nn
