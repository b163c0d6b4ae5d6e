#include "kiln/record/detail/record_codec.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/record/format.h"

namespace kiln::record {
namespace {

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

[[noreturn]] void bad_value(const std::string& context, const Field& f, const std::string& what) {
  throw Error(
      detail::concat(context, "field '", f.name, "' (", field_type_name(f.type), "): ", what));
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::none:
      return "no value";
    case Value::Kind::integer:
      return "an integer";
    case Value::Kind::real:
      return "a real number";
    case Value::Kind::text:
      return "text/bytes";
    case Value::Kind::array:
      return "an array";
  }
  return "?";
}

int64_t integer_value(const std::string& context, const Field& f, const Value& v, int64_t lo,
                      int64_t hi) {
  int64_t x;
  if (v.kind() == Value::Kind::integer) {
    x = v.integer();
  } else if (v.kind() == Value::Kind::real && std::trunc(v.real()) == v.real() &&
             std::abs(v.real()) < 9.2e18) {
    x = int64_t(v.real());
  } else {
    bad_value(context, f, detail::concat("got ", kind_name(v.kind()), ", expected an integer"));
  }
  if (x < lo || x > hi) bad_value(context, f, detail::concat("value ", x, " is out of range"));
  return x;
}

double real_value(const std::string& context, const Field& f, const Value& v) {
  if (v.kind() == Value::Kind::real) return v.real();
  if (v.kind() == Value::Kind::integer) return double(v.integer());
  bad_value(context, f, detail::concat("got ", kind_name(v.kind()), ", expected a number"));
}

void encode_array(const std::string& context, const Field& f, const Value& v,
                  std::vector<uint8_t>& out) {
  if (v.kind() != Value::Kind::array)
    bad_value(context, f, detail::concat("got ", kind_name(v.kind()), ", expected an array"));
  if (v.elem() != f.elem)
    bad_value(context, f,
              detail::concat("array of ", elem_type_name(v.elem()), ", the schema says ",
                             elem_type_name(f.elem)));
  const auto& shape = v.shape();
  auto shape_str = [&] {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  };
  if (shape.size() != f.shape.size())
    bad_value(context, f,
              detail::concat("array of shape ", shape_str(), " has rank ", shape.size(),
                             ", the schema says ", f.shape.size()));
  uint64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0 || shape[i] > int64_t(UINT32_MAX) ||
        (f.shape[i] != -1 && shape[i] != f.shape[i]))
      bad_value(context, f,
                detail::concat("array of shape ", shape_str(),
                               " does not match the schema at dimension ", i));
    numel *= uint64_t(shape[i]);
    if (numel > kMaxRecordBytes) bad_value(context, f, "array too large for one record");
  }
  if (numel * elem_size(f.elem) != v.data().size())
    bad_value(context, f,
              detail::concat("array of shape ", shape_str(), " needs ", numel * elem_size(f.elem),
                             " bytes, got ", v.data().size()));
  for (size_t i = 0; i < shape.size(); ++i)
    if (f.shape[i] == -1) put<uint32_t>(out, uint32_t(shape[i]));
  out.insert(out.end(), v.data().begin(), v.data().end());
}

}  // namespace

uint64_t index_key(const Field& field, const Value& v) {
  static const std::string context = "record index lookup: ";
  switch (field.type) {
    case FieldType::int32:
    case FieldType::int64:
      return index_key_int(integer_value(context, field, v, std::numeric_limits<int64_t>::min(),
                                         std::numeric_limits<int64_t>::max()));
    case FieldType::float32:
      return index_key_float(float(real_value(context, field, v)));
    case FieldType::float64:
      return index_key_float(real_value(context, field, v));
    case FieldType::string:
      if (v.kind() != Value::Kind::text) bad_value(context, field, "expected text");
      return index_key_string({reinterpret_cast<const char*>(v.data().data()), v.data().size()});
    default:
      bad_value(context, field, "this field type cannot be indexed");
  }
}

uint64_t index_key(const FieldView& v) {
  switch (v.field->type) {
    case FieldType::int32:
    case FieldType::int64:
      return index_key_int(v.as_int());
    case FieldType::float32:
    case FieldType::float64:
      return index_key_float(v.as_double());
    case FieldType::string:
      return index_key_string(v.as_string());
    default:
      return 0;
  }
}

void encode_row(const Schema& schema, const Row& row, const std::string& context,
                std::vector<uint8_t>& out, std::vector<uint64_t>* keys) {
  size_t matched = 0;
  for (const Field& f : schema.fields()) {
    const Value* v = row.find(f.name);
    if (!v) bad_value(context, f, "missing from the row");
    ++matched;
    switch (f.type) {
      case FieldType::int32: {
        auto x = int32_t(integer_value(context, f, *v, INT32_MIN, INT32_MAX));
        put<int32_t>(out, x);
        if (keys && f.indexed) keys->push_back(index_key_int(x));
        break;
      }
      case FieldType::int64: {
        int64_t x = integer_value(context, f, *v, std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::max());
        put<int64_t>(out, x);
        if (keys && f.indexed) keys->push_back(index_key_int(x));
        break;
      }
      case FieldType::float32: {
        auto x = float(real_value(context, f, *v));
        put<float>(out, x);
        if (keys && f.indexed) keys->push_back(index_key_float(x));
        break;
      }
      case FieldType::float64: {
        double x = real_value(context, f, *v);
        put<double>(out, x);
        if (keys && f.indexed) keys->push_back(index_key_float(x));
        break;
      }
      case FieldType::string:
      case FieldType::bytes: {
        if (v->kind() != Value::Kind::text)
          bad_value(
              context, f,
              detail::concat("got ", kind_name(v->kind()), ", expected ", field_type_name(f.type)));
        if (v->data().size() > kMaxRecordBytes) bad_value(context, f, "more than 2 GiB");
        put<uint32_t>(out, uint32_t(v->data().size()));
        out.insert(out.end(), v->data().begin(), v->data().end());
        if (keys && f.indexed)
          keys->push_back(index_key_string(
              {reinterpret_cast<const char*>(v->data().data()), v->data().size()}));
        break;
      }
      case FieldType::ndarray:
        encode_array(context, f, *v, out);
        break;
    }
  }
  if (row.values().size() != matched) {
    for (const auto& [name, value] : row.values())
      if (schema.find(name) < 0)
        throw Error(
            detail::concat(context, "the row has a field '", name, "' that is not in the schema"));
  }
}

void decode_row(const Schema& schema, std::span<const uint8_t> payload, uint64_t offset,
                const std::string& file, RowView& out) {
  out.fields.resize(schema.size());
  Cursor c(payload.data(), payload.size(), offset, file);
  for (size_t i = 0; i < schema.size(); ++i) {
    const Field& f = schema[i];
    FieldView& v = out.fields[i];
    v.field = &f;
    v.rank = 0;
    switch (f.type) {
      case FieldType::int32:
      case FieldType::float32:
        v.data = c.bytes(4, f.name.c_str());
        break;
      case FieldType::int64:
      case FieldType::float64:
        v.data = c.bytes(8, f.name.c_str());
        break;
      case FieldType::string:
      case FieldType::bytes: {
        uint32_t n = c.u32("a length");
        if (n > c.remaining())
          fail_at(file, c.file_offset() - 4,
                  detail::concat("field '", f.name, "' claims ", n, " bytes but only ",
                                 c.remaining(), " remain in the record (schema mismatch?)"));
        v.data = c.bytes(n, f.name.c_str());
        break;
      }
      case FieldType::ndarray: {
        v.rank = int(f.shape.size());
        uint64_t at = c.file_offset();
        uint64_t numel = 1;
        uint64_t limit = c.remaining();  // bytes available for elements, an upper bound
        for (int d = 0; d < v.rank; ++d) {
          int64_t dim = f.shape[size_t(d)];
          if (dim == -1) dim = c.u32("a free array dimension");
          v.dims[d] = dim;
          // Compare before multiplying so a lying dimension cannot overflow the count.
          if (dim != 0 && numel > limit / uint64_t(dim))
            numel = limit + 1;
          else
            numel *= uint64_t(dim);
        }
        size_t es = elem_size(f.elem);
        if (numel > c.remaining() / es)
          fail_at(file, at,
                  detail::concat("ndarray field '", f.name, "' of ", numel,
                                 " elements needs more than the ", c.remaining(),
                                 " bytes left in the record (schema mismatch?)"));
        v.data = c.bytes(numel * es, f.name.c_str());
        break;
      }
    }
  }
  if (c.remaining() != 0)
    fail_at(file, c.file_offset(),
            detail::concat(c.remaining(),
                           " bytes left over after the last field (the record does not match "
                           "the schema)"));
}

}  // namespace kiln::record
