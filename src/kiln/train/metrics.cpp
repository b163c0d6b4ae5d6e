#include "kiln/train/metrics.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::train {

void Accuracy::update(const Tensor& logits, const Tensor& labels, float) {
  if (logits.rank() != 2)
    throw ShapeError("Accuracy: logits " + describe(logits) + " are not [N, C]");
  const int64_t n = logits.dim(0), c = logits.dim(1);
  Tensor l = logits.dtype() == DType::f32 ? logits.contiguous() : Tensor::empty(logits.shape());
  if (logits.dtype() != DType::f32) l.copy_from(logits);
  const float* p = l.data<float>();
  std::vector<int64_t> truth;
  if (labels.rank() == 1 && labels.dim(0) == n && !is_floating(labels.dtype())) {
    truth = labels.to_vector<int64_t>();
  } else if (labels.shape() == logits.shape()) {
    std::vector<float> dense = labels.to_vector<float>();
    truth.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      auto row = dense.begin() + i * c;
      truth[size_t(i)] = std::max_element(row, row + c) - row;
    }
  } else {
    throw ShapeError("Accuracy: labels " + describe(labels) + " fit neither [" + std::to_string(n) +
                     "] nor logits " + describe(logits));
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

MetricPtr metric_by_name(const std::string& name) {
  std::string n;
  for (char ch : name) n.push_back(char(std::tolower(static_cast<unsigned char>(ch))));
  if (n == "accuracy" || n == "acc") return std::make_shared<Accuracy>();
  if (n == "loss") return std::make_shared<Loss>();
  throw Error("unknown metric '" + name + "' (expected accuracy or loss)");
}

}  // namespace kiln::train
