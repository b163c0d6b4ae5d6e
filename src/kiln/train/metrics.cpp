#include "kiln/train/metrics.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::train {

void Accuracy::update(const Tensor& logits, const Tensor& labels, float) {
  if (logits.rank() < 2)
    throw ShapeError("Accuracy: logits " + describe(logits) + " are not [N, C] or [..., C]");
  const int64_t c = logits.dim(-1), n = c > 0 ? logits.numel() / c : 0;
  Tensor l = logits.dtype() == DType::f32 ? logits.contiguous() : Tensor::empty(logits.shape());
  if (logits.dtype() != DType::f32) l.copy_from(logits);
  const float* p = l.data<float>();
  std::vector<int64_t> truth;
  Shape leading(std::vector<int64_t>(logits.shape().begin(), logits.shape().end() - 1));
  if (labels.shape() == leading && !is_floating(labels.dtype())) {
    truth = labels.to_vector<int64_t>();  // row-major: position i is logits row i
  } else if (labels.shape() == logits.shape()) {
    std::vector<float> dense = labels.to_vector<float>();
    truth.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      auto row = dense.begin() + i * c;
      truth[size_t(i)] = std::max_element(row, row + c) - row;
    }
  } else {
    throw ShapeError("Accuracy: labels " + describe(labels) + " fit neither " + leading.str() +
                     " nor logits " + describe(logits));
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* row = p + i * c;
    int64_t best = std::max_element(row, row + c) - row;
    correct_ += best == truth[size_t(i)];
  }
  total_ += n;
}

void Accuracy::set_sums(const std::vector<double>& s) {
  if (s.size() != 2) throw Error("Accuracy: set_sums takes {correct, total}");
  correct_ = int64_t(s[0]);
  total_ = int64_t(s[1]);
}

double Accuracy::eval() const {
  if (total_ == 0) throw Error("Accuracy: no samples seen (empty evaluation data set?)");
  return double(correct_) / double(total_);
}

void Loss::update(const Tensor&, const Tensor&, float loss) {
  sum_ += loss;
  ++batches_;
}

void Loss::set_sums(const std::vector<double>& s) {
  if (s.size() != 2) throw Error("Loss: set_sums takes {sum, batches}");
  sum_ = s[0];
  batches_ = int64_t(s[1]);
}

double Loss::eval() const {
  if (batches_ == 0) throw Error("Loss: no batches seen (empty evaluation data set?)");
  return sum_ / double(batches_);
}

void Perplexity::update(const Tensor&, const Tensor& labels, float loss) {
  const double n = double(labels.numel());
  loss_sum_ += double(loss) * n;
  count_ += n;
}

void Perplexity::set_sums(const std::vector<double>& s) {
  if (s.size() != 2) throw Error("Perplexity: set_sums takes {loss sum, label count}");
  loss_sum_ = s[0];
  count_ = s[1];
}

double Perplexity::eval() const {
  if (count_ == 0) throw Error("Perplexity: no labels seen (empty evaluation data set?)");
  return std::exp(loss_sum_ / count_);
}

MetricPtr metric_by_name(const std::string& name) {
  std::string n;
  for (char ch : name) n.push_back(char(std::tolower(static_cast<unsigned char>(ch))));
  if (n == "accuracy" || n == "acc") return std::make_shared<Accuracy>();
  if (n == "loss") return std::make_shared<Loss>();
  if (n == "perplexity" || n == "ppl") return std::make_shared<Perplexity>();
  throw Error("unknown metric '" + name + "' (expected accuracy, loss or perplexity)");
}

}  // namespace kiln::train
