#include "kiln/data/transforms.h"

#include "kiln/core/error.h"

namespace kiln::data::transforms {

Compose::Compose(std::vector<Op> ops) : ops_(std::move(ops)) {
  if (ops_.empty()) throw Error("Compose: ops is empty");
  for (auto& op : ops_) {
    if (!op.ptr()) throw Error("Compose: ops holds a null transform");
  }
}

std::string Compose::name() const {
  std::string s = "Compose[";
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (i) s += ",";
    s += ops_[i]->name();
  }
  return s + "]";
}

void Compose::apply(std::vector<Tensor>& columns, RowRng& rng) const {
  for (auto& op : ops_) {
    try {
      op->apply(columns, rng);
    } catch (const std::exception& e) {
      throw Error(op->name() + ": " + e.what());
    }
  }
}

OneHot::OneHot(int64_t num_classes, std::optional<DType> dtype)
    : num_classes_(num_classes), dtype_(dtype) {
  if (num_classes <= 0)
    throw Error(kiln::detail::concat("OneHot: num_classes must be positive, got ", num_classes));
}

Tensor OneHot::apply_one(const Tensor& input, RowRng&) const {
  if (!input.defined() || input.rank() > 1 ||
      (input.dtype() != DType::i32 && input.dtype() != DType::i64 && input.dtype() != DType::u8)) {
    throw ShapeError("OneHot: expected integer class ids (a scalar or 1-D), got " +
                     describe(input));
  }
  std::vector<int64_t> ids = input.to_vector<int64_t>();
  DType out_type = dtype_.value_or(input.dtype());
  std::vector<int64_t> dims = input.shape().dims();
  dims.push_back(num_classes_);
  std::vector<float> hot(ids.size() * size_t(num_classes_), 0.f);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= num_classes_) {
      throw Error(
          kiln::detail::concat("OneHot: class id ", ids[i], " is outside [0, ", num_classes_, ")"));
    }
    hot[i * size_t(num_classes_) + size_t(ids[i])] = 1.f;
  }
  Tensor out = Tensor::empty(Shape(dims), out_type);
  convert(hot.data(), DType::f32, out.raw_data(), out_type, int64_t(hot.size()));
  return out;
}

Tensor TypeCast::apply_one(const Tensor& input, RowRng&) const {
  if (!input.defined()) throw ShapeError("TypeCast: undefined input");
  if (input.dtype() == dtype_) return input;
  Tensor out = Tensor::empty(input.shape(), dtype_);
  out.copy_from(input);
  return out;
}

Lambda::Lambda(std::string name, std::function<Tensor(const Tensor&)> fn)
    : name_(std::move(name)), fn_([f = std::move(fn)](const Tensor& t, RowRng&) { return f(t); }) {}

}  // namespace kiln::data::transforms
