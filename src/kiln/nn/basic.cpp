#include "kiln/nn/basic.h"

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::nn {

Tensor Flatten::construct(const Tensor& x) {
  if (x.rank() < 1) throw ShapeError("Flatten: input " + describe(x) + " has no batch dim");
  return ops::flatten(x);
}

Dropout::Dropout(double p) : Cell("Dropout"), p_(p) {
  if (!(p >= 0 && p < 1)) {
    throw Error("Dropout: p must lie in [0, 1), got " + std::to_string(p) +
                " (keep_prob = 1 - p must be > 0)");
  }
}

std::shared_ptr<Dropout> Dropout::with_keep_prob(double keep_prob) {
  if (!(keep_prob > 0 && keep_prob <= 1)) {
    throw Error("Dropout: keep_prob must lie in (0, 1], got " + std::to_string(keep_prob));
  }
  return std::make_shared<Dropout>(1.0 - keep_prob);
}

Tensor Dropout::construct(const Tensor& x) {
  if (!training() || p_ == 0.0) return x;
  return ops::dropout(x, p_, true)[0];
}

}  // namespace kiln::nn
