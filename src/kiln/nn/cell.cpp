#include "kiln/nn/cell.h"

namespace kiln::nn {

Tensor& Cell::register_parameter(const std::string& name, Tensor value) {
  value.set_requires_grad(true);
  parameters_.emplace_back(name, std::move(value));
  return parameters_.back().second;
}

Tensor& Cell::register_buffer(const std::string& name, Tensor value) {
  buffers_.emplace_back(name, std::move(value));
  return buffers_.back().second;
}

void Cell::collect(const std::string& prefix, bool params, bool buffers,
                   std::vector<NamedTensor>& out) const {
  if (params) {
    for (const auto& [n, t] : parameters_) out.emplace_back(prefix + n, t);
  }
  if (buffers) {
    for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  }
  // A child registered without a name (MindSpore's auto_prefix=False: WithLossCell's backbone)
  // lends its parameters their own names.
  for (const auto& [n, child] : children_) {
    child->collect(n.empty() ? prefix : prefix + n + ".", params, buffers, out);
  }
}

std::vector<NamedTensor> Cell::parameters_and_names() const {
  std::vector<NamedTensor> out;
  collect("", true, false, out);
  return out;
}

std::vector<Tensor> Cell::trainable_params() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : parameters_and_names()) out.push_back(t);
  return out;
}

std::vector<NamedTensor> Cell::buffers_and_names() const {
  std::vector<NamedTensor> out;
  collect("", false, true, out);
  return out;
}

std::vector<NamedTensor> Cell::state_and_names() const {
  std::vector<NamedTensor> out = parameters_and_names();
  for (auto& nb : buffers_and_names()) out.push_back(std::move(nb));
  return out;
}

void Cell::set_train(bool mode) {
  training_ = mode;
  for (auto& [n, child] : children_) child->set_train(mode);
}

}  // namespace kiln::nn
