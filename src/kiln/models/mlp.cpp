#include "kiln/models/mlp.h"

namespace kiln::models {

MLP::MLP(int64_t in_features, std::vector<int64_t> hidden, int64_t num_classes) : Cell("MLP") {
  using namespace nn;
  auto layers = std::make_shared<SequentialCell>();
  layers->append(std::make_shared<Flatten>());
  int64_t width = in_features;
  for (int64_t h : hidden) {
    layers->append(std::make_shared<Dense>(width, h));
    layers->append(std::make_shared<ReLU>());
    width = h;
  }
  layers->append(std::make_shared<Dense>(width, num_classes));
  layers_ = register_cell("layers", layers);
}

Tensor MLP::construct(const Tensor& x) {
  return layers_->construct(x);
}

}  // namespace kiln::models
