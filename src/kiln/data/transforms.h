#pragma once
// General transforms (MindSpore's mindspore.dataset.transforms): Compose, OneHot, TypeCast, and
// Lambda for user functions.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/transform.h"

namespace kiln::data::transforms {

// Applies `ops` in order, as one operation.
class Compose : public TensorTransform {
 public:
  explicit Compose(std::vector<Op> ops);
  std::string name() const override;
  void apply(std::vector<Tensor>& columns, RowRng& rng) const override;

 private:
  std::vector<Op> ops_;
};

// Integer class ids (scalar or 1-D) -> one-hot vectors [.., num_classes] of the same dtype, or of
// `dtype` when given.
class OneHot : public TensorTransform {
 public:
  explicit OneHot(int64_t num_classes, std::optional<DType> dtype = std::nullopt);
  std::string name() const override { return "OneHot"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  int64_t num_classes_;
  std::optional<DType> dtype_;
};

class TypeCast : public TensorTransform {
 public:
  explicit TypeCast(DType dtype) : dtype_(dtype) {}
  std::string name() const override { return "TypeCast"; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override;

 private:
  DType dtype_;
};

// A user function as a transform (MindSpore's PyFunc). Must be thread-safe: map calls it from
// several workers. Random draws should come from the RowRng, so runs are reproducible.
class Lambda : public TensorTransform {
 public:
  using Fn = std::function<Tensor(const Tensor&, RowRng&)>;
  Lambda(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  Lambda(std::string name, std::function<Tensor(const Tensor&)> fn);
  std::string name() const override { return name_; }
  Tensor apply_one(const Tensor& input, RowRng& rng) const override { return fn_(input, rng); }

 private:
  std::string name_;
  Fn fn_;
};

}  // namespace kiln::data::transforms
