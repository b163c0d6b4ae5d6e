#pragma once
// Evaluation metrics (MindSpore's nn.Accuracy, nn.Loss), fed batch by batch by Model::eval.
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::train {

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void clear() = 0;
  // logits [N, C]; labels [N] class indices (i32/i64) or [N, C] one-hot/probabilities (or
  // logits [..., C] with class indices [...], every position a sample); loss is the batch's
  // mean loss.
  virtual void update(const Tensor& logits, const Tensor& labels, float loss) = 0;
  virtual double eval() const = 0;
  // The metric's state as sums that add across shards (data parallel evaluation adds every
  // rank's), and the state set back from such sums.
  virtual std::vector<double> sums() const = 0;
  virtual void set_sums(const std::vector<double>& sums) = 0;
};
using MetricPtr = std::shared_ptr<Metric>;

// Fraction of rows (positions, for sequence logits) whose arg-max logit is the label.
class Accuracy : public Metric {
 public:
  void clear() override { correct_ = total_ = 0; }
  void update(const Tensor& logits, const Tensor& labels, float loss) override;
  double eval() const override;
  std::vector<double> sums() const override { return {double(correct_), double(total_)}; }
  void set_sums(const std::vector<double>& s) override;

 private:
  int64_t correct_ = 0, total_ = 0;
};

// Mean of the per-batch losses.
class Loss : public Metric {
 public:
  void clear() override { sum_ = 0, batches_ = 0; }
  void update(const Tensor& logits, const Tensor& labels, float loss) override;
  double eval() const override;
  std::vector<double> sums() const override { return {sum_, double(batches_)}; }
  void set_sums(const std::vector<double>& s) override;

 private:
  double sum_ = 0;
  int64_t batches_ = 0;
};

// exp of the mean loss per label (each batch's mean loss weighted by its label count, so a
// short last batch counts for what it holds): a language model's perplexity when the loss is
// the mean next-token cross-entropy.
class Perplexity : public Metric {
 public:
  void clear() override { loss_sum_ = count_ = 0; }
  void update(const Tensor& logits, const Tensor& labels, float loss) override;
  double eval() const override;
  std::vector<double> sums() const override { return {loss_sum_, count_}; }
  void set_sums(const std::vector<double>& s) override;

 private:
  double loss_sum_ = 0, count_ = 0;
};

// "accuracy"/"Accuracy"/"acc", "loss"/"Loss", "perplexity"/"ppl"; Error naming anything else.
MetricPtr metric_by_name(const std::string& name);

}  // namespace kiln::train
