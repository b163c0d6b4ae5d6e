#include "dataset/python_call.h"

#include <cstring>

#include "kiln/core/error.h"
#include "tensor_convert.h"

namespace kiln::python {

PyHandle hold(py::object object) {
  return PyHandle(new py::object(std::move(object)), [](py::object* p) {
    // At interpreter exit the object is leaked: no GIL can be taken any more.
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete p;
  });
}

void throw_python_error(py::error_already_set& error, const std::string& where) {
  std::string text;
  try {
    auto format = py::module_::import("traceback").attr("format_exception");
    py::list lines = format(error.type(), error.value(), error.trace());
    for (auto& line : lines) text += line.cast<std::string>();
  } catch (const py::error_already_set&) {
    text = error.what();
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  throw Error(where + ": Python exception:\n" + text);
}

namespace {

py::array as_supported_array(py::handle value, const std::string& what) {
  if (py::isinstance<py::bytes>(value) || py::isinstance<py::bytearray>(value)) {
    std::string bytes = py::isinstance<py::bytes>(value) ? std::string(value.cast<py::bytes>())
                                                         : std::string(value.cast<py::bytearray>());
    py::array_t<uint8_t> out(py::ssize_t(bytes.size()));
    if (!bytes.empty()) std::memcpy(out.mutable_data(), bytes.data(), bytes.size());
    return out;
  }
  if (py::isinstance<py::str>(value)) {
    return as_supported_array(py::bytes(value.cast<std::string>()), what);
  }
  py::array array = py::array::ensure(value);
  if (!array) {
    PyErr_Clear();
    throw Error(what + ": cannot make an array of a " +
                std::string(py::str(py::type::of(value).attr("__name__"))));
  }
  const char kind = array.dtype().kind();
  const auto size = array.dtype().itemsize();
  auto cast = [&](const char* name) { return py::array(array.attr("astype")(name)); };
  if (kind == 'f' && size == 8) return cast("float32");
  if (kind == 'i' && size < 4) return cast("int32");
  if (kind == 'u' && size == 2) return cast("int32");
  if (kind == 'u' && size >= 4) return cast("int64");
  if (kind == 'f' || kind == 'i' || kind == 'u' || kind == 'b') return array;
  throw Error(what + ": arrays of dtype " + std::string(py::str(array.dtype())) +
              " are not supported (use numbers, bool, bytes or str)");
}

}  // namespace

Tensor tensor_from_python(py::handle value, const std::string& what) {
  return from_numpy(as_supported_array(value, what), /*copy=*/true);
}

void row_from_python(py::handle row, size_t num_columns, std::vector<Tensor>& out,
                     const std::string& what) {
  out.clear();
  const bool sequence = py::isinstance<py::tuple>(row) || py::isinstance<py::list>(row);
  if (!sequence) {
    if (num_columns != 1) {
      throw Error(kiln::detail::concat(
          what, ": got one value (a ", std::string(py::str(py::type::of(row).attr("__name__"))),
          ") but ", num_columns, " columns; return a tuple with one value per column"));
    }
    out.push_back(tensor_from_python(row, what + " column 0"));
    return;
  }
  py::sequence items = py::reinterpret_borrow<py::sequence>(row);
  if (size_t(py::len(items)) != num_columns) {
    throw Error(kiln::detail::concat(what, ": got a row of ", py::len(items), " values but ",
                                     num_columns, " columns"));
  }
  out.reserve(num_columns);
  for (size_t i = 0; i < num_columns; ++i) {
    out.push_back(tensor_from_python(items[i], kiln::detail::concat(what, " column ", i)));
  }
}

py::tuple row_to_python(const std::vector<Tensor>& columns, bool writeable) {
  py::tuple out(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    py::array a = to_numpy(columns[i]);
    if (!writeable) a.attr("setflags")(py::arg("write") = false);
    out[i] = std::move(a);
  }
  return out;
}

}  // namespace kiln::python
