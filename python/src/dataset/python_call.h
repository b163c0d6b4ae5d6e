#pragma once
// Calling Python from the pipeline's threads: holding Python objects from C++ (released under the
// GIL whatever thread drops them), a Python exception turned into a kiln::Error that carries its
// traceback, and rows converted between Python values and tensors.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::python {

namespace py = pybind11;

// A Python object kept by C++ code that may drop it on a thread without the GIL.
using PyHandle = std::shared_ptr<py::object>;
PyHandle hold(py::object object);

// Throws kiln::Error("<where>: <Python traceback>"); the pipeline adds its stage and row, stops,
// and rethrows it at the consumer. Call with the GIL held, from a catch of error_already_set.
[[noreturn]] void throw_python_error(py::error_already_set& error, const std::string& where);

// One column value from Python (array, scalar, list, bytes or str) as a tensor that owns a copy:
// a source may reuse its buffers, and a tensor never needs the GIL to be freed. float64 becomes
// f32 and other integer widths i32/i64 (Kiln has no f64); str and bytes become u8 [n].
Tensor tensor_from_python(py::handle value, const std::string& what);

// A row from Python: a tuple or list with one value per column, or a bare value for one column.
void row_from_python(py::handle row, size_t num_columns, std::vector<Tensor>& out,
                     const std::string& what);

// Columns as numpy arrays viewing the tensors' memory (no copy).
py::tuple row_to_python(const std::vector<Tensor>& columns, bool writeable = true);

}  // namespace kiln::python
