#include "dataset/bind_dataset.h"

namespace kiln::python {

// The data pipeline's bindings land here (python/CONTRACT.md, seam 1).
void bind_dataset(pybind11::module_& m) {
  m.def_submodule("dataset");
}

}  // namespace kiln::python
