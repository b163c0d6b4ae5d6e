#pragma once
// A multilayer perceptron's training step traced to a graph, as the AUTO_PARALLEL tests plan it.
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/graph/tracer.h"
#include "kiln/nn/dense.h"
#include "kiln/ops/functional.h"
#include "kiln/parallel/auto_parallel.h"

namespace kiln::parallel::traced {

// x [batch, widths[0]] -> Dense -> relu -> ... -> Dense(widths[n-2], widths[n-1]) -> cross
// entropy; layer k's parameters are fc<k+1>.weight and fc<k+1>.bias.
struct Mlp {
  Mlp(int64_t batch, std::vector<int64_t> widths) {
    for (size_t k = 0; k + 1 < widths.size(); ++k) {
      layers.push_back(std::make_unique<nn::Dense>(widths[k], widths[k + 1]));
    }
    graph::Tracer tracer(g);
    std::vector<nn::NamedTensor> state;
    for (size_t k = 0; k < layers.size(); ++k) {
      const std::string name = "fc" + std::to_string(k + 1);
      state.emplace_back(name + ".weight", layers[k]->weight());
      state.emplace_back(name + ".bias", layers[k]->bias());
    }
    tracer.bind_state(state);
    Tensor h = tracer.input({Shape({batch, widths[0]}), DType::f32}, "images");
    Tensor y = tracer.input({Shape({batch}), DType::i32}, "labels");
    for (size_t k = 0; k < layers.size(); ++k) {
      h = (*layers[k])(h);
      if (k + 1 < layers.size()) h = ops::relu(h);
    }
    Tensor l = ops::softmax_cross_entropy(h, y);
    loss = tracer.value_of(l);
    tracer.add_output(l);
    tracer.finish();
  }
  const TensorLayout& layout_of(const AutoPlan& plan, const std::string& name) const {
    for (const auto& [v, layout] : plan.parameters) {
      if (g.value(v).name == name) return layout;
    }
    throw Error("no parameter " + name);
  }
  std::vector<std::unique_ptr<nn::Dense>> layers;
  graph::Graph g;
  graph::ValueId loss = graph::kNoValue;
};

}  // namespace kiln::parallel::traced
