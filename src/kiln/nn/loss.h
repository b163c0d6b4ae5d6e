#pragma once
#include <string>

#include "kiln/nn/cell.h"

namespace kiln::nn {

// "mean", "sum" or "none"; throws Error naming anything else.
Reduction reduction_from_name(const std::string& name);

// MindSpore's SoftmaxCrossEntropyWithLogits: -sum(labels * log_softmax(logits)) per sample.
// sparse = true: labels are class indices [N] (i32/i64); otherwise probabilities [N, C].
// Sparse labels may also be [...] for logits [..., C] (every position one sample: a sequence
// model's next-token loss).
// MindSpore's defaults are sparse=false, reduction="none".
class SoftmaxCrossEntropyWithLogits : public LossCell {
 public:
  explicit SoftmaxCrossEntropyWithLogits(bool sparse = false,
                                         const std::string& reduction = "none");
  Tensor construct(const Tensor& logits, const Tensor& labels) override;
  std::optional<Reduction> batch_reduction() const override { return reduction_; }

 private:
  bool sparse_;
  Reduction reduction_;
};

// mean/sum/none of (logits - labels)².
class MSELoss : public LossCell {
 public:
  explicit MSELoss(const std::string& reduction = "mean");
  Tensor construct(const Tensor& logits, const Tensor& labels) override;
  std::optional<Reduction> batch_reduction() const override { return reduction_; }

 private:
  Reduction reduction_;
};

// mean/sum/none of |logits - labels|.
class L1Loss : public LossCell {
 public:
  explicit L1Loss(const std::string& reduction = "mean");
  Tensor construct(const Tensor& logits, const Tensor& labels) override;
  std::optional<Reduction> batch_reduction() const override { return reduction_; }

 private:
  Reduction reduction_;
};

}  // namespace kiln::nn
