#pragma once
// Evaluation metrics (MindSpore's nn.Accuracy, nn.Loss), fed batch by batch by Model::eval.
#include <memory>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::train {

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void clear() = 0;
  // logits [N, C]; labels [N] class indices (i32/i64) or [N, C] one-hot/probabilities; loss is
  // the batch's mean loss.
  virtual void update(const Tensor& logits, const Tensor& labels, float loss) = 0;
  virtual double eval() const = 0;
};
using MetricPtr = std::shared_ptr<Metric>;

// Fraction of rows whose arg-max logit is the label.
class Accuracy : public Metric {
 public:
  void clear() override { correct_ = total_ = 0; }
  void update(const Tensor& logits, const Tensor& labels, float loss) override;
  double eval() const override;

 private:
  int64_t correct_ = 0, total_ = 0;
};

// Mean of the per-batch losses.
class Loss : public Metric {
 public:
  void clear() override { sum_ = 0, batches_ = 0; }
  void update(const Tensor& logits, const Tensor& labels, float loss) override;
  double eval() const override;

 private:
  double sum_ = 0;
  int64_t batches_ = 0;
};

// "accuracy"/"Accuracy"/"acc", "loss"/"Loss"; Error naming anything else.
MetricPtr metric_by_name(const std::string& name);

}  // namespace kiln::train
