#pragma once
// Values going into a record file (Value, Row) and views of values coming out (FieldView,
// RowView). Views point into the mapped file and stay valid while the reader lives.
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/record/schema.h"

namespace kiln::record {

// One field value handed to FileWriter::write_raw_data. Integers and reals are converted to the
// field's type when they fit (an int64 value into an int32 field is range-checked). Text and
// array data are either owned (std::string / std::vector) or borrowed (a view that must outlive
// the write_raw_data call).
class Value {
 public:
  enum class Kind : uint8_t { none, integer, real, text, array };

  Value() = default;
  template <class T>
  requires std::is_integral_v<T> Value(T v) : kind_(Kind::integer), integer_(int64_t(v)) {
    static_assert(!std::is_same_v<T, uint64_t> || sizeof(T) < 8, "uint64 values do not fit int64");
  }
  Value(float v) : kind_(Kind::real), real_(v) {}
  Value(double v) : kind_(Kind::real), real_(v) {}
  Value(std::string s) : kind_(Kind::text), store_(Store::string), owned_(std::move(s)) {
    repoint();
  }
  Value(const char* s) : Value(std::string(s)) {}

  // Bytes or text that the caller keeps alive until write_raw_data returns.
  static Value borrowed(std::span<const uint8_t> bytes);
  static Value borrowed(std::string_view text);
  static Value bytes(std::vector<uint8_t> bytes);
  // A dense row-major array. `data` holds numel * elem_size(elem) bytes.
  static Value array(ElemType elem, std::vector<int64_t> shape, std::vector<uint8_t> data);
  static Value array_view(ElemType elem, std::vector<int64_t> shape, std::span<const uint8_t> data);
  template <class T>
  static Value array(std::vector<int64_t> shape, const std::vector<T>& values);

  Kind kind() const { return kind_; }
  int64_t integer() const { return integer_; }
  double real() const { return real_; }
  std::span<const uint8_t> data() const { return view_; }  // text or array bytes
  ElemType elem() const { return elem_; }
  const std::vector<int64_t>& shape() const { return shape_; }

 private:
  // Where view_ points: the caller's memory, owned_ or owned_bytes_.
  enum class Store : uint8_t { borrowed, string, bytes };
  void repoint();
  Kind kind_ = Kind::none;
  Store store_ = Store::borrowed;
  int64_t integer_ = 0;
  double real_ = 0;
  std::string owned_;
  std::vector<uint8_t> owned_bytes_;
  std::span<const uint8_t> view_;
  ElemType elem_ = ElemType::none;
  std::vector<int64_t> shape_;

 public:
  // Copies and moves re-point the view at their own storage.
  Value(const Value& o);
  Value& operator=(const Value& o);
  Value(Value&& o) noexcept;
  Value& operator=(Value&& o) noexcept;
  ~Value() = default;
};

template <class T>
constexpr ElemType elem_type_of() {
  if constexpr (std::is_same_v<T, uint8_t>)
    return ElemType::uint8;
  else if constexpr (std::is_same_v<T, int32_t>)
    return ElemType::int32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return ElemType::int64;
  else if constexpr (std::is_same_v<T, float>)
    return ElemType::float32;
  else if constexpr (std::is_same_v<T, double>)
    return ElemType::float64;
  else
    static_assert(sizeof(T) == 0, "unsupported array element type");
}

template <class T>
Value Value::array(std::vector<int64_t> shape, const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return array(elem_type_of<T>(), std::move(shape), std::move(bytes));
}

// A row for the writer: field name -> value. Every schema field must be set, no others.
class Row {
 public:
  Row() = default;
  Row(std::initializer_list<std::pair<std::string, Value>> values) : values_(values) {}
  Row& set(std::string name, Value v);
  const Value* find(std::string_view name) const;
  const std::vector<std::pair<std::string, Value>>& values() const { return values_; }

 private:
  std::vector<std::pair<std::string, Value>> values_;
};

// A decoded field: its bytes inside the file and, for arrays, the row's actual shape.
struct FieldView {
  const Field* field = nullptr;
  std::span<const uint8_t> data;  // scalars: 4 or 8 bytes; string/bytes: the bytes; array: elements
  int rank = 0;
  int64_t dims[kMaxArrayRank] = {};

  int64_t as_int() const;               // int32 / int64 fields
  double as_double() const;             // any scalar number field
  std::string_view as_string() const {  // string / bytes fields
    return {reinterpret_cast<const char*>(data.data()), data.size()};
  }
  std::vector<int64_t> shape() const { return {dims, dims + rank}; }
  int64_t numel() const;
};

struct RowView {
  std::vector<FieldView> fields;  // schema order
  const FieldView& operator[](size_t i) const { return fields[i]; }
};

}  // namespace kiln::record
