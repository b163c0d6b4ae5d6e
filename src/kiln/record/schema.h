#pragma once
// The typed schema of a record set: an ordered list of named fields. Every row has every field.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::record {

// Codes are part of the file format (docs/record-format.md); never renumber them.
enum class FieldType : uint8_t {
  int32 = 1,
  int64 = 2,
  float32 = 3,
  float64 = 4,
  string = 5,   // UTF-8 text, any length
  bytes = 6,    // opaque bytes (an encoded image, say)
  ndarray = 7,  // a dense row-major array of `elem` with `shape` (-1 = free dimension)
};

// Element types of ndarray fields (file-format codes too).
enum class ElemType : uint8_t {
  none = 0,
  uint8 = 1,
  int32 = 2,
  int64 = 3,
  float16 = 4,
  bfloat16 = 5,
  float32 = 6,
  float64 = 7,
};

inline constexpr int kMaxArrayRank = 8;
inline constexpr size_t kMaxFieldNameBytes = 255;
inline constexpr size_t kMaxFields = 1024;

struct Field {
  std::string name;
  FieldType type = FieldType::int64;
  ElemType elem = ElemType::none;  // ndarray only
  std::vector<int64_t> shape;      // ndarray only; -1 marks a dimension that varies per row
  bool indexed = false;            // set by FileWriter::add_index

  static Field scalar(std::string name, FieldType type) {
    return {std::move(name), type, ElemType::none, {}};
  }
  static Field array(std::string name, ElemType elem, std::vector<int64_t> shape) {
    return {std::move(name), FieldType::ndarray, elem, std::move(shape), false};
  }
  int free_dims() const;
  // Bytes the field always takes in a record, or -1 when its size varies (string, bytes, or an
  // ndarray with a free dimension).
  int64_t fixed_size() const;
  bool operator==(const Field&) const = default;
};

class Schema {
 public:
  Schema() = default;
  // Validates names (unique, 1..255 bytes), types, element types and shapes; throws kiln::Error.
  explicit Schema(std::vector<Field> fields);

  const std::vector<Field>& fields() const { return fields_; }
  size_t size() const { return fields_.size(); }
  const Field& operator[](size_t i) const { return fields_[i]; }
  // Index of the field called `name`, or -1.
  int find(std::string_view name) const;
  // Same, but throws kiln::Error listing the fields there are.
  int require(std::string_view name) const;
  void set_indexed(size_t i, bool on) { fields_[i].indexed = on; }
  bool operator==(const Schema&) const = default;
  std::string str() const;  // one line per field, for `kiln record info`

 private:
  std::vector<Field> fields_;
};

std::string_view field_type_name(FieldType t);
std::string_view elem_type_name(ElemType t);
size_t elem_size(ElemType t);    // 0 for none
bool is_indexable(FieldType t);  // scalars and strings
bool is_valid_field_type(uint8_t code);
bool is_valid_elem_type(uint8_t code);
// "int32" -> FieldType::int32, "uint8" -> ElemType::uint8 (for the CLI); throw kiln::Error.
FieldType field_type_from_name(std::string_view name);
ElemType elem_type_from_name(std::string_view name);

}  // namespace kiln::record
