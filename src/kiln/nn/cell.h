#pragma once
// Cell: the building block of networks (MindSpore's nn.Cell). A cell owns named parameters,
// non-trainable buffers (BatchNorm's running statistics) and child cells, and computes in
// `construct`. The same construct runs eagerly, on the autograd tape, or traced by graph mode.
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::nn {

using NamedTensor = std::pair<std::string, Tensor>;
using Tensors = std::vector<Tensor>;

// A cell computes in one of two forms, and overrides the one that fits it:
//   construct(x)              one input, one output: layers and most networks;
//   construct_multi(inputs)   several inputs or outputs: a two-tower network, one that returns
//                             logits and features.
// Each form's default calls the other, so either can be called on any cell; a cell that
// overrides neither throws naming itself. (Two names, not two overloads of construct: a layer
// overriding one overload would hide the other from its callers.)
class Cell {
 public:
  virtual ~Cell() = default;

  virtual Tensor construct(const Tensor& x);
  virtual Tensors construct_multi(const Tensors& inputs);
  Tensor operator()(const Tensor& x) { return construct(x); }
  Tensors operator()(const Tensors& inputs) { return construct_multi(inputs); }
  template <class... More>
  Tensors operator()(const Tensor& first, const Tensor& second, const More&... more) {
    static_assert((std::is_convertible_v<More, Tensor> && ...), "a cell's inputs are Tensors");
    return construct_multi(Tensors{first, second, more...});
  }
  // construct_multi's first output: what a loss and the metrics see when Model trains the cell
  // (its further outputs are Model::predict's).
  Tensor first_output(const Tensors& inputs);

  // Parameters and buffers of this cell and its children, named by path ("layer1.0.conv1.weight").
  std::vector<NamedTensor> parameters_and_names() const;
  std::vector<Tensor> trainable_params() const;
  std::vector<NamedTensor> buffers_and_names() const;
  // Parameters then buffers: everything a checkpoint holds.
  std::vector<NamedTensor> state_and_names() const;

  void set_train(bool mode = true);
  bool training() const { return training_; }

  const std::string& cell_name() const { return name_; }

 protected:
  explicit Cell(std::string name) : name_(std::move(name)) {}
  // Registers a trainable parameter (requires_grad set) and returns the stored handle (a Tensor
  // copy shares the data and autograd state, so layers may keep one).
  Tensor& register_parameter(const std::string& name, Tensor value);
  Tensor& register_buffer(const std::string& name, Tensor value);
  template <class C>
  std::shared_ptr<C> register_cell(const std::string& name, std::shared_ptr<C> cell) {
    children_.emplace_back(name, cell);
    return cell;
  }
  const std::vector<std::pair<std::string, std::shared_ptr<Cell>>>& children() const {
    return children_;
  }

 private:
  void collect(const std::string& prefix, bool params, bool buffers,
               std::vector<NamedTensor>& out) const;

  std::string name_;
  bool training_ = true;
  // deques: references returned by register_* stay valid as more are registered.
  std::deque<NamedTensor> parameters_;
  std::deque<NamedTensor> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Cell>>> children_;
};

enum class Reduction { mean, sum, none };

// A loss: construct(logits, labels) -> scalar (or per-sample with reduction "none").
class LossCell {
 public:
  virtual ~LossCell() = default;
  virtual Tensor construct(const Tensor& logits, const Tensor& labels) = 0;
  // How construct() combines the samples of a batch, where it is one of mean or sum over
  // samples alone: a graph-mode step that runs its batch as micro-batches averages or adds
  // their losses by it. nullopt (a loss that does not say): no micro-batches.
  virtual std::optional<Reduction> batch_reduction() const { return std::nullopt; }
  Tensor operator()(const Tensor& logits, const Tensor& labels) {
    return construct(logits, labels);
  }
};

}  // namespace kiln::nn
