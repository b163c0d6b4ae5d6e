#include "kiln/nn/cell.h"

#include "kiln/core/error.h"

namespace kiln::nn {
namespace {

// The cells whose default form is running on this thread: a cell whose default form calls the
// other default form overrides neither, which would otherwise recurse until the stack ends.
thread_local std::vector<const Cell*> defaulting;

class DefaultForm {
 public:
  explicit DefaultForm(const Cell& cell) {
    for (const Cell* c : defaulting) {
      if (c == &cell) {
        throw Error(cell.cell_name() +
                    ": the cell overrides neither construct(x) nor construct_multi(inputs); "
                    "override the one that fits its inputs");
      }
    }
    defaulting.push_back(&cell);
  }
  ~DefaultForm() { defaulting.pop_back(); }
  DefaultForm(const DefaultForm&) = delete;
  DefaultForm& operator=(const DefaultForm&) = delete;
};

}  // namespace

Tensor Cell::construct(const Tensor& x) {
  DefaultForm guard(*this);
  Tensors outputs = construct_multi({x});
  if (outputs.size() != 1) {
    throw Error(cell_name() + " returns " + std::to_string(outputs.size()) +
                " outputs; call construct_multi (or the cell with a list of inputs) to get them");
  }
  return std::move(outputs[0]);
}

Tensor Cell::first_output(const Tensors& inputs) {
  Tensors outputs = construct_multi(inputs);
  if (outputs.empty()) throw Error(cell_name() + ": construct_multi returned no outputs");
  return std::move(outputs[0]);
}

Tensors Cell::construct_multi(const Tensors& inputs) {
  if (inputs.size() != 1) {
    throw Error(cell_name() + " takes one input (it overrides construct(x)), got " +
                std::to_string(inputs.size()) +
                "; a cell of several inputs overrides construct_multi(inputs) (in Python: "
                "construct(self, *inputs))");
  }
  DefaultForm guard(*this);
  return {construct(inputs[0])};
}

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
