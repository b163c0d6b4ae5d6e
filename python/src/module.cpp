// The extension module kiln._kiln: the engine's bindings, wrapped by the Python package kiln.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "dataset/bind_dataset.h"
#include "kiln/core/error.h"

namespace py = pybind11;

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "Kiln's C++ engine; import kiln, not this module";
  // Shape and dtype mistakes are ValueErrors to a Python user; other engine errors RuntimeErrors
  // (pybind11's default for std::exception), their messages unchanged.
  static py::exception<kiln::ShapeError> shape_error(m, "ShapeError", PyExc_ValueError);
  static py::exception<kiln::FileError> file_error(m, "FileError", PyExc_OSError);
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const kiln::ShapeError& e) {
      shape_error(e.what());
    } catch (const kiln::FileError& e) {
      file_error(e.what());
    }
  });
  kiln::python::bind_tensor(m);
  kiln::python::bind_context(m);
  kiln::python::bind_ops(m);
  kiln::python::bind_nn(m);
  kiln::python::bind_optim(m);
  kiln::python::bind_train(m);
  kiln::python::bind_profile(m);
  kiln::python::bind_dataset(m);
  kiln::python::bind_native_dataset_fallback(m);
}
