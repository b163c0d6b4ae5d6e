#include "kiln/core/shape.h"

#include <sstream>

#include "kiln/core/error.h"

namespace kiln {

int Shape::normalize_axis(int axis) const {
  int r = rank();
  int a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) {
    throw ShapeError(detail::concat("axis ", axis, " is out of range for shape ", str()));
  }
  return a;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::string Shape::str() const {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < dims_.size(); ++i) out << (i ? ", " : "") << dims_[i];
  out << ']';
  return out.str();
}

Strides contiguous_strides(const Shape& shape) {
  Strides s(static_cast<size_t>(shape.rank()));
  int64_t acc = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    s[size_t(i)] = acc;
    acc *= shape[i];
  }
  return s;
}

Strides channels_last_strides(const Shape& shape) {
  if (shape.rank() != 4) return contiguous_strides(shape);
  int64_t c = shape[1], h = shape[2], w = shape[3];
  return {h * w * c, 1, w * c, c};
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    int ia = a.rank() - r + i, ib = b.rank() - r + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      throw ShapeError(detail::concat(op, ": shapes ", a.str(), " and ", b.str(),
                                      " cannot be broadcast together (dimension ", i, ": ", da,
                                      " vs ", db, ")"));
    }
    out[size_t(i)] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

}  // namespace kiln
