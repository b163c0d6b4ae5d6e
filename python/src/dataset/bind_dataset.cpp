#include "dataset/bind_dataset.h"

namespace kiln::python {

void bind_dataset(pybind11::module_& m) {
  auto dataset = m.def_submodule("dataset", "Kiln's data pipeline (kiln.dataset's native half)");
  bind_pipeline(dataset);
  bind_transforms(dataset);
  bind_sources(dataset);
  bind_record_writer(dataset);
}

}  // namespace kiln::python
