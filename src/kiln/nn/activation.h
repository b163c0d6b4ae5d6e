#pragma once
#include "kiln/nn/cell.h"

namespace kiln::nn {

class ReLU : public Cell {
 public:
  ReLU() : Cell("ReLU") {}
  Tensor construct(const Tensor& x) override;
};

// The exact (erf) GELU, MindSpore's GELU(approximate=False).
class GELU : public Cell {
 public:
  GELU() : Cell("GELU") {}
  Tensor construct(const Tensor& x) override;
};

class Sigmoid : public Cell {
 public:
  Sigmoid() : Cell("Sigmoid") {}
  Tensor construct(const Tensor& x) override;
};

class Tanh : public Cell {
 public:
  Tanh() : Cell("Tanh") {}
  Tensor construct(const Tensor& x) override;
};

}  // namespace kiln::nn
