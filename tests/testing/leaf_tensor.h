#pragma once
// A tensor the autograd tape tracks: the inputs of the gradient tests.
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::testing {

inline Tensor leaf(std::vector<float> values, Shape shape) {
  Tensor t = Tensor::from_vector(values, shape);
  t.set_requires_grad(true);
  return t;
}

}  // namespace kiln::testing
