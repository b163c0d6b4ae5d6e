#include "kiln/nn/activation.h"

#include "kiln/ops/functional.h"

namespace kiln::nn {

Tensor ReLU::construct(const Tensor& x) {
  return ops::relu(x);
}
Tensor GELU::construct(const Tensor& x) {
  return ops::gelu(x);
}
Tensor Sigmoid::construct(const Tensor& x) {
  return ops::sigmoid(x);
}
Tensor Tanh::construct(const Tensor& x) {
  return ops::tanh(x);
}

}  // namespace kiln::nn
