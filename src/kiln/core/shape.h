#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace kiln {

// A tensor's dimensions. Rank is small (≤ 8 in practice), so a plain vector is enough.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return int(dims_.size()); }
  int64_t operator[](int i) const { return dims_[size_t(i)]; }
  int64_t& operator[](int i) { return dims_[size_t(i)]; }
  // Dimension i, counting from the end when negative; throws when out of range.
  int64_t dim(int i) const { return dims_[size_t(normalize_axis(i))]; }
  int normalize_axis(int axis) const;
  int64_t numel() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>& dims() { return dims_; }
  auto begin() const { return dims_.begin(); }
  auto end() const { return dims_.end(); }
  bool operator==(const Shape&) const = default;
  std::string str() const;  // "[2, 3, 4]"

 private:
  std::vector<int64_t> dims_;
};

using Strides = std::vector<int64_t>;

// Row-major strides (in elements) for a contiguous tensor of this shape.
Strides contiguous_strides(const Shape& shape);
// Strides that store an NCHW tensor channels-last (NHWC in memory).
Strides channels_last_strides(const Shape& shape);

// NumPy broadcasting of two shapes; throws ShapeError naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace kiln
