// The extension module kiln._kiln: the engine's bindings, wrapped by the Python package kiln.
#include <pybind11/pybind11.h>

#include "dataset/bind_dataset.h"

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "Kiln's C++ engine; import kiln, not this module";
  kiln::python::bind_dataset(m);
}
