// kiln._kiln.Profiler: the engine's profiler (kiln::Profiler, profile/profiler.h) under
// MindSpore's names, Profiler(output_path=...) ... analyse(). It collects from the engine's own
// observers, so what it sees does not depend on which thread (or interpreter) runs the ops.
#include <pybind11/stl.h>

#include "bindings.h"
#include "kiln/profile/profiler.h"

namespace py = pybind11;

namespace kiln::python {

void bind_profile(py::module_& m) {
  py::class_<Profiler>(m, "Profiler")
      .def(py::init([](const std::string& output_path, bool profile_memory, bool start_profile) {
             return std::make_unique<Profiler>(ProfilerOptions{.output_path = output_path,
                                                               .profile_memory = profile_memory,
                                                               .start_profile = start_profile});
           }),
           py::arg("output_path") = "./profiler_data", py::arg("profile_memory") = true,
           py::arg("start_profile") = true)
      .def("start", &Profiler::start)
      .def("stop", &Profiler::stop)
      // Writing the files and the report takes a while; nothing in it calls Python.
      .def("analyse", &Profiler::analyse, py::call_guard<py::gil_scoped_release>())
      .def("annotate", &Profiler::annotate, py::arg("key"), py::arg("value"))
      .def_property_readonly("output_path", &Profiler::output_path)
      .def_property_readonly("op_launches",
                             [](const Profiler& p) { return p.collection().ops.size(); })
      .def_property_readonly("steps",
                             [](const Profiler& p) { return p.collection().steps.size(); });
}

}  // namespace kiln::python
