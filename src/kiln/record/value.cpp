#include "kiln/record/value.h"

#include <cstring>

#include "kiln/core/error.h"

namespace kiln::record {

Value Value::borrowed(std::span<const uint8_t> bytes) {
  Value v;
  v.kind_ = Kind::text;
  v.view_ = bytes;
  return v;
}

Value Value::borrowed(std::string_view text) {
  return borrowed(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

Value Value::bytes(std::vector<uint8_t> bytes) {
  Value v;
  v.kind_ = Kind::text;
  v.store_ = Store::bytes;
  v.owned_bytes_ = std::move(bytes);
  v.repoint();
  return v;
}

Value Value::array(ElemType elem, std::vector<int64_t> shape, std::vector<uint8_t> data) {
  Value v;
  v.kind_ = Kind::array;
  v.elem_ = elem;
  v.shape_ = std::move(shape);
  v.store_ = Store::bytes;
  v.owned_bytes_ = std::move(data);
  v.repoint();
  return v;
}

Value Value::array_view(ElemType elem, std::vector<int64_t> shape, std::span<const uint8_t> data) {
  Value v;
  v.kind_ = Kind::array;
  v.elem_ = elem;
  v.shape_ = std::move(shape);
  v.view_ = data;
  return v;
}

void Value::repoint() {
  if (store_ == Store::string)
    view_ = {reinterpret_cast<const uint8_t*>(owned_.data()), owned_.size()};
  else if (store_ == Store::bytes)
    view_ = owned_bytes_;
}

Value::Value(const Value& o)
    : kind_(o.kind_),
      store_(o.store_),
      integer_(o.integer_),
      real_(o.real_),
      owned_(o.owned_),
      owned_bytes_(o.owned_bytes_),
      view_(o.view_),
      elem_(o.elem_),
      shape_(o.shape_) {
  repoint();
}

Value& Value::operator=(const Value& o) {
  if (this != &o) *this = Value(o);
  return *this;
}

Value::Value(Value&& o) noexcept
    : kind_(o.kind_),
      store_(o.store_),
      integer_(o.integer_),
      real_(o.real_),
      owned_(std::move(o.owned_)),
      owned_bytes_(std::move(o.owned_bytes_)),
      view_(o.view_),
      elem_(o.elem_),
      shape_(std::move(o.shape_)) {
  repoint();  // a short string lives inside the object and does not move with it
}

Value& Value::operator=(Value&& o) noexcept {
  if (this != &o) {
    kind_ = o.kind_;
    store_ = o.store_;
    integer_ = o.integer_;
    real_ = o.real_;
    owned_ = std::move(o.owned_);
    owned_bytes_ = std::move(o.owned_bytes_);
    view_ = o.view_;
    elem_ = o.elem_;
    shape_ = std::move(o.shape_);
    repoint();
  }
  return *this;
}

Row& Row::set(std::string name, Value v) {
  for (auto& [n, value] : values_)
    if (n == name) {
      value = std::move(v);
      return *this;
    }
  values_.emplace_back(std::move(name), std::move(v));
  return *this;
}

const Value* Row::find(std::string_view name) const {
  for (const auto& [n, value] : values_)
    if (n == name) return &value;
  return nullptr;
}

int64_t FieldView::as_int() const {
  switch (field->type) {
    case FieldType::int32: {
      int32_t v;
      std::memcpy(&v, data.data(), 4);
      return v;
    }
    case FieldType::int64: {
      int64_t v;
      std::memcpy(&v, data.data(), 8);
      return v;
    }
    default:
      throw Error(detail::concat("record field '", field->name, "' is ",
                                 field_type_name(field->type), ", not an integer"));
  }
}

double FieldView::as_double() const {
  switch (field->type) {
    case FieldType::float32: {
      float v;
      std::memcpy(&v, data.data(), 4);
      return v;
    }
    case FieldType::float64: {
      double v;
      std::memcpy(&v, data.data(), 8);
      return v;
    }
    case FieldType::int32:
    case FieldType::int64:
      return double(as_int());
    default:
      throw Error(detail::concat("record field '", field->name, "' is ",
                                 field_type_name(field->type), ", not a number"));
  }
}

int64_t FieldView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

}  // namespace kiln::record
