#pragma once
// The data pipeline's bindings (kiln._kiln.dataset), called once from the module's init.
#include <pybind11/pybind11.h>

namespace kiln::python {

// Binds kiln::data into m.def_submodule("dataset"); the Python package kiln.dataset wraps it.
void bind_dataset(pybind11::module_& m);

}  // namespace kiln::python
