// FileWriter with MindSpore's mindrecord interface: a schema as a dict of
// {"name": {"type": "int32"|"int64"|"float32"|"float64"|"string"|"bytes", "shape": [...]}}
// (a "shape" makes the field an array of that element type; -1 marks a free dimension) and rows
// as dicts of Python values or numpy arrays.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>

#include "dataset/bind_dataset.h"
#include "kiln/core/error.h"
#include "kiln/record/file_writer.h"

namespace kiln::python {

namespace py = pybind11;

namespace {

using record::ElemType;
using record::Field;
using record::FieldType;

record::Field field_from_schema(const std::string& name, const py::dict& spec) {
  if (!spec.contains("type")) {
    throw Error("FileWriter.add_schema: field '" + name + "' has no \"type\"");
  }
  const std::string type = py::str(spec["type"]);
  if (spec.contains("shape")) {
    static const std::map<std::string, ElemType> elems = {
        {"uint8", ElemType::uint8},     {"int32", ElemType::int32},
        {"int64", ElemType::int64},     {"float16", ElemType::float16},
        {"float32", ElemType::float32}, {"float64", ElemType::float64}};
    auto it = elems.find(type);
    if (it == elems.end()) {
      throw Error("FileWriter.add_schema: field '" + name + "' has a shape but type '" + type +
                  "'; arrays are uint8, int32, int64, float16, float32 or float64");
    }
    return Field::array(name, it->second, spec["shape"].cast<std::vector<int64_t>>());
  }
  static const std::map<std::string, FieldType> scalars = {
      {"int32", FieldType::int32},     {"int64", FieldType::int64},
      {"float32", FieldType::float32}, {"float64", FieldType::float64},
      {"string", FieldType::string},   {"bytes", FieldType::bytes}};
  auto it = scalars.find(type);
  if (it == scalars.end()) {
    throw Error("FileWriter.add_schema: field '" + name + "' has type '" + type +
                "'; expected int32, int64, float32, float64, string or bytes");
  }
  return Field::scalar(name, it->second);
}

ElemType elem_of(const py::array& a, const std::string& name) {
  const char kind = a.dtype().kind();
  const auto size = a.dtype().itemsize();
  if (kind == 'u' && size == 1) return ElemType::uint8;
  if (kind == 'i' && size == 4) return ElemType::int32;
  if (kind == 'i' && size == 8) return ElemType::int64;
  if (kind == 'f' && size == 2) return ElemType::float16;
  if (kind == 'f' && size == 4) return ElemType::float32;
  if (kind == 'f' && size == 8) return ElemType::float64;
  throw Error("FileWriter.write_raw_data: field '" + name + "' is an array of dtype " +
              std::string(py::str(a.dtype())) +
              "; expected uint8, int32, int64, float16, float32 or float64");
}

record::Value value_from_python(const py::handle& v, const std::string& name) {
  if (py::isinstance<py::bool_>(v)) return record::Value(int64_t(v.cast<bool>()));
  if (py::isinstance<py::int_>(v)) return record::Value(v.cast<int64_t>());
  if (py::isinstance<py::float_>(v)) return record::Value(v.cast<double>());
  if (py::isinstance<py::str>(v)) return record::Value(v.cast<std::string>());
  if (py::isinstance<py::bytes>(v)) {
    std::string s = v.cast<py::bytes>();
    return record::Value::bytes(std::vector<uint8_t>(s.begin(), s.end()));
  }
  py::array a = py::array::ensure(v, py::array::c_style);
  if (!a) {
    PyErr_Clear();
    throw Error("FileWriter.write_raw_data: field '" + name + "' has a value of type " +
                std::string(py::str(py::type::of(v).attr("__name__"))));
  }
  if (a.ndim() == 0) {  // a numpy scalar
    const char kind = a.dtype().kind();
    if (kind == 'i' || kind == 'u' || kind == 'b')
      return record::Value(v.attr("item")().cast<int64_t>());
    if (kind == 'f') return record::Value(v.attr("item")().cast<double>());
  }
  std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
  std::vector<uint8_t> bytes(size_t(a.nbytes()));
  if (!bytes.empty()) std::memcpy(bytes.data(), a.data(), bytes.size());
  return record::Value::array(elem_of(a, name), std::move(shape), std::move(bytes));
}

}  // namespace

void bind_record_writer(py::module_& m) {
  using py::arg;
  py::class_<record::FileWriter>(m, "FileWriter",
                                 "Writes a record set (MindSpore's mindrecord.FileWriter); files "
                                 "appear only at commit()")
      .def(py::init([](const std::string& file_name, int shard_num, bool overwrite) {
             record::WriterOptions o;
             o.overwrite = overwrite;
             return std::make_unique<record::FileWriter>(file_name, shard_num, o);
           }),
           arg("file_name"), arg("shard_num") = 1, arg("overwrite") = false)
      .def(
          "add_schema",
          [](record::FileWriter& w, const py::dict& schema, const std::string&) {
            std::vector<Field> fields;
            for (auto& [key, spec] : schema) {
              fields.push_back(field_from_schema(py::str(key), spec.cast<py::dict>()));
            }
            w.add_schema(std::move(fields));
          },
          arg("content"), arg("desc") = "")
      .def("add_index", &record::FileWriter::add_index, arg("index_fields"))
      .def(
          "write_raw_data",
          [](record::FileWriter& w, const py::list& raw_data) {
            std::vector<record::Row> rows;
            rows.reserve(raw_data.size());
            for (auto& item : raw_data) {
              record::Row row;
              for (auto& [key, value] : item.cast<py::dict>()) {
                std::string name = py::str(key);
                row.set(name, value_from_python(value, name));
              }
              rows.push_back(std::move(row));
            }
            py::gil_scoped_release release;
            w.write_raw_data(rows);
          },
          arg("raw_data"))
      .def("commit", &record::FileWriter::commit, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("paths", &record::FileWriter::paths)
      .def_property_readonly("rows_written", &record::FileWriter::rows_written);
}

}  // namespace kiln::python
