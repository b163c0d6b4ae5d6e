#pragma once
// Seam 1 of python/CONTRACT.md: the module init calls bind_dataset(m), which fills the submodule
// `kiln._kiln.dataset` (the data pipeline: datasets, iterators, transforms, record files).
#include <pybind11/pybind11.h>

namespace kiln::python {

void bind_dataset(pybind11::module_& m);

// The parts, one file each.
void bind_pipeline(pybind11::module_& dataset);       // Dataset, TupleIterator, config
void bind_transforms(pybind11::module_& dataset);     // vision and general transforms, PyFunc
void bind_sources(pybind11::module_& dataset);        // Python, MNIST, image folder, record sources
void bind_record_writer(pybind11::module_& dataset);  // FileWriter

}  // namespace kiln::python
