#pragma once
// The core's bindings, one function per part of the engine, called in this order by the
// module's init (module.cpp): later parts use the classes earlier ones bound.
#include <pybind11/pybind11.h>

namespace kiln::python {

void bind_tensor(pybind11::module_& m);   // Tensor, DType
void bind_context(pybind11::module_& m);  // set_context, auto-parallel, seed, communication
void bind_ops(pybind11::module_& m);      // kiln._kiln.ops: the functional API
void bind_nn(pybind11::module_& m);       // Cell (subclassable), layers, losses, initializers
void bind_optim(pybind11::module_& m);    // optimizers, learning-rate schedules
void bind_train(pybind11::module_& m);    // Model, callbacks, checkpoints, the model zoo
void bind_profile(pybind11::module_& m);  // Profiler
// After bind_dataset: a bare class for kiln::data::Dataset when the dataset bindings bound none.
void bind_native_dataset_fallback(pybind11::module_& m);

}  // namespace kiln::python
