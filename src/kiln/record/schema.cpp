#include "kiln/record/schema.h"

#include <sstream>

#include "kiln/core/error.h"

namespace kiln::record {

std::string_view field_type_name(FieldType t) {
  switch (t) {
    case FieldType::int32:
      return "int32";
    case FieldType::int64:
      return "int64";
    case FieldType::float32:
      return "float32";
    case FieldType::float64:
      return "float64";
    case FieldType::string:
      return "string";
    case FieldType::bytes:
      return "bytes";
    case FieldType::ndarray:
      return "ndarray";
  }
  return "?";
}

std::string_view elem_type_name(ElemType t) {
  switch (t) {
    case ElemType::none:
      return "none";
    case ElemType::uint8:
      return "uint8";
    case ElemType::int32:
      return "int32";
    case ElemType::int64:
      return "int64";
    case ElemType::float16:
      return "float16";
    case ElemType::bfloat16:
      return "bfloat16";
    case ElemType::float32:
      return "float32";
    case ElemType::float64:
      return "float64";
  }
  return "?";
}

size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::none:
      return 0;
    case ElemType::uint8:
      return 1;
    case ElemType::int32:
      return 4;
    case ElemType::int64:
      return 8;
    case ElemType::float16:
      return 2;
    case ElemType::bfloat16:
      return 2;
    case ElemType::float32:
      return 4;
    case ElemType::float64:
      return 8;
  }
  return 0;
}

bool is_indexable(FieldType t) {
  return t == FieldType::int32 || t == FieldType::int64 || t == FieldType::float32 ||
         t == FieldType::float64 || t == FieldType::string;
}

bool is_valid_field_type(uint8_t code) {
  return code >= 1 && code <= 7;
}
bool is_valid_elem_type(uint8_t code) {
  return code >= 1 && code <= 7;
}

FieldType field_type_from_name(std::string_view name) {
  for (uint8_t c = 1; c <= 7; ++c)
    if (field_type_name(FieldType(c)) == name) return FieldType(c);
  throw Error(detail::concat("record schema: unknown field type '", name,
                             "' (int32, int64, float32, float64, string, bytes, ndarray)"));
}

ElemType elem_type_from_name(std::string_view name) {
  for (uint8_t c = 1; c <= 7; ++c)
    if (elem_type_name(ElemType(c)) == name) return ElemType(c);
  throw Error(detail::concat("record schema: unknown array element type '", name,
                             "' (uint8, int32, int64, float16, bfloat16, float32, float64)"));
}

int Field::free_dims() const {
  int n = 0;
  for (int64_t d : shape) n += d == -1;
  return n;
}

int64_t Field::fixed_size() const {
  switch (type) {
    case FieldType::int32:
    case FieldType::float32:
      return 4;
    case FieldType::int64:
    case FieldType::float64:
      return 8;
    case FieldType::string:
    case FieldType::bytes:
      return -1;
    case FieldType::ndarray: {
      if (free_dims() > 0) return -1;
      int64_t n = int64_t(elem_size(elem));
      for (int64_t d : shape) n *= d;
      return n;
    }
  }
  return -1;
}

Schema::Schema(std::vector<Field> fields) : fields_(std::move(fields)) {
  KILN_CHECK(!fields_.empty(), "record schema: a schema needs at least one field");
  KILN_CHECK(fields_.size() <= kMaxFields, "record schema: ", fields_.size(),
             " fields, more than the limit of ", kMaxFields);
  for (size_t i = 0; i < fields_.size(); ++i) {
    const Field& f = fields_[i];
    KILN_CHECK(!f.name.empty() && f.name.size() <= kMaxFieldNameBytes, "record schema: field ", i,
               " has a name of ", f.name.size(), " bytes (1..", kMaxFieldNameBytes, " allowed)");
    KILN_CHECK(f.name.find('\0') == std::string::npos, "record schema: field ", i,
               " has a NUL byte in its name");
    KILN_CHECK(is_valid_field_type(uint8_t(f.type)), "record schema: field '", f.name,
               "' has an unknown type code ", int(f.type));
    for (size_t j = 0; j < i; ++j)
      KILN_CHECK(fields_[j].name != f.name, "record schema: field name '", f.name,
                 "' appears twice");
    if (f.type == FieldType::ndarray) {
      KILN_CHECK(is_valid_elem_type(uint8_t(f.elem)), "record schema: ndarray field '", f.name,
                 "' needs an element type (uint8, int32, int64, float16, bfloat16, float32, "
                 "float64)");
      KILN_CHECK(int(f.shape.size()) <= kMaxArrayRank, "record schema: ndarray field '", f.name,
                 "' has rank ", f.shape.size(), ", more than ", kMaxArrayRank);
      for (int64_t d : f.shape)
        KILN_CHECK(d >= -1 && d <= int64_t(UINT32_MAX), "record schema: ndarray field '", f.name,
                   "' has dimension ", d, " (use -1 for a free dimension)");
      // A fixed-shape array must fit in one record (records are at most 2 GiB).
      long double bytes = double(elem_size(f.elem));
      for (int64_t d : f.shape) bytes *= d < 0 ? 1 : d;
      KILN_CHECK(bytes < 2147483648.0L, "record schema: ndarray field '", f.name,
                 "' would take more than 2 GiB per row");
    } else {
      KILN_CHECK(f.elem == ElemType::none && f.shape.empty(), "record schema: field '", f.name,
                 "' of type ", field_type_name(f.type), " cannot have an element type or shape");
    }
    KILN_CHECK(!f.indexed || is_indexable(f.type), "record schema: field '", f.name, "' of type ",
               field_type_name(f.type),
               " cannot be indexed (only int32, int64, float32, float64 and string fields)");
  }
}

int Schema::find(std::string_view name) const {
  for (size_t i = 0; i < fields_.size(); ++i)
    if (fields_[i].name == name) return int(i);
  return -1;
}

int Schema::require(std::string_view name) const {
  int i = find(name);
  if (i >= 0) return i;
  std::string names;
  for (const Field& f : fields_) names += (names.empty() ? "" : ", ") + f.name;
  throw Error(detail::concat("record schema: no field named '", name, "' (fields: ", names, ")"));
}

std::string Schema::str() const {
  std::ostringstream out;
  for (const Field& f : fields_) {
    out << "  " << f.name << ": " << field_type_name(f.type);
    if (f.type == FieldType::ndarray) {
      out << " " << elem_type_name(f.elem) << "[";
      for (size_t i = 0; i < f.shape.size(); ++i) out << (i ? ", " : "") << f.shape[i];
      out << "]";
    }
    if (f.indexed) out << " (indexed)";
    out << "\n";
  }
  return out.str();
}

}  // namespace kiln::record
