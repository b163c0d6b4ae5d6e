#include "kiln/nn/loss.h"

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::nn {
namespace {

Tensor reduce(const Tensor& per_element, Reduction r) {
  switch (r) {
    case Reduction::mean:
      return ops::mean(per_element);
    case Reduction::sum:
      return ops::sum(per_element);
    case Reduction::none:
      return per_element;
  }
  return per_element;
}

void check_same_shape(const char* cell, const Tensor& logits, const Tensor& labels) {
  if (logits.shape() != labels.shape()) {
    throw ShapeError(std::string(cell) + ": logits " + describe(logits) + " and labels " +
                     describe(labels) + " differ in shape");
  }
}

}  // namespace

Reduction reduction_from_name(const std::string& name) {
  if (name == "mean") return Reduction::mean;
  if (name == "sum") return Reduction::sum;
  if (name == "none") return Reduction::none;
  throw Error("unknown reduction '" + name + "' (expected mean, sum or none)");
}

SoftmaxCrossEntropyWithLogits::SoftmaxCrossEntropyWithLogits(bool sparse,
                                                             const std::string& reduction)
    : sparse_(sparse), reduction_(reduction_from_name(reduction)) {}

Tensor SoftmaxCrossEntropyWithLogits::construct(const Tensor& logits, const Tensor& labels) {
  if (sparse_ && logits.rank() > 2) {
    // Sequence logits [..., C] with labels [...] (a language model's next tokens): every
    // position is one sample.
    Shape leading(std::vector<int64_t>(logits.shape().begin(), logits.shape().end() - 1));
    if (labels.shape() != leading) {
      throw ShapeError("SoftmaxCrossEntropyWithLogits: sparse labels " + describe(labels) +
                       " must have the logits' leading shape " + leading.str() + " (logits " +
                       describe(logits) + ")");
    }
    Tensor flat = construct(ops::reshape(logits, {leading.numel(), logits.dim(-1)}),
                            ops::reshape(labels, {leading.numel()}));
    return reduction_ == Reduction::none ? ops::reshape(flat, leading) : flat;
  }
  if (logits.rank() != 2) {
    throw ShapeError("SoftmaxCrossEntropyWithLogits: logits " + describe(logits) +
                     " are not [N, C]" + (sparse_ ? " or [..., C]" : ""));
  }
  if (sparse_) {
    if (labels.rank() != 1 || labels.dim(0) != logits.dim(0) ||
        (labels.dtype() != DType::i32 && labels.dtype() != DType::i64)) {
      throw ShapeError("SoftmaxCrossEntropyWithLogits: sparse labels " + describe(labels) +
                       " are not i32/i64 [" + std::to_string(logits.dim(0)) + "]");
    }
    int64_t code = reduction_ == Reduction::mean ? 0 : reduction_ == Reduction::sum ? 1 : 2;
    return ops::softmax_cross_entropy(logits, labels, code);
  }
  if (labels.rank() == 1 && labels.dim(0) == logits.dim(0) &&
      (labels.dtype() == DType::i32 || labels.dtype() == DType::i64)) {
    throw ShapeError("SoftmaxCrossEntropyWithLogits: labels " + describe(labels) +
                     " are class ids, but the loss was made with sparse=false (one-hot or "
                     "probability labels [N, C]); construct it with sparse=true: "
                     "SoftmaxCrossEntropyWithLogits(true, \"mean\")");
  }
  check_same_shape("SoftmaxCrossEntropyWithLogits", logits, labels);
  Tensor per_sample = ops::neg(ops::sum(ops::mul(labels, ops::log_softmax(logits, -1)), {-1}));
  return reduce(per_sample, reduction_);
}

MSELoss::MSELoss(const std::string& reduction) : reduction_(reduction_from_name(reduction)) {}

Tensor MSELoss::construct(const Tensor& logits, const Tensor& labels) {
  check_same_shape("MSELoss", logits, labels);
  return reduce(ops::square(ops::sub(logits, labels)), reduction_);
}

L1Loss::L1Loss(const std::string& reduction) : reduction_(reduction_from_name(reduction)) {}

Tensor L1Loss::construct(const Tensor& logits, const Tensor& labels) {
  check_same_shape("L1Loss", logits, labels);
  return reduce(ops::abs(ops::sub(logits, labels)), reduction_);
}

}  // namespace kiln::nn
