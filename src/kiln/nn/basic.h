#pragma once
#include "kiln/nn/cell.h"

namespace kiln::nn {

// [N, ...] -> [N, prod(...)].
class Flatten : public Cell {
 public:
  Flatten() : Cell("Flatten") {}
  Tensor construct(const Tensor& x) override;
};

// Zeroes each element with probability p while training and scales the rest by 1/(1-p);
// identity in evaluation. MindSpore's older keep_prob = 1 - p: Dropout::with_keep_prob(0.9).
class Dropout : public Cell {
 public:
  explicit Dropout(double p = 0.5);
  static std::shared_ptr<Dropout> with_keep_prob(double keep_prob);
  Tensor construct(const Tensor& x) override;
  double p() const { return p_; }

 private:
  double p_;
};

// Identity, handy as a placeholder in a SequentialCell (e.g. an optional shortcut).
class Identity : public Cell {
 public:
  Identity() : Cell("Identity") {}
  Tensor construct(const Tensor& x) override { return x; }
};

}  // namespace kiln::nn
