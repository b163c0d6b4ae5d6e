// Process settings: set_context, set_auto_parallel_context, set_seed, and communication.
#include <pybind11/stl.h>

#include "bindings.h"
#include "kiln/comm/communicator.h"
#include "kiln/core/context.h"
#include "kiln/core/parallel_context.h"
#include "kiln/core/random.h"
#include "kiln/core/threads.h"

namespace py = pybind11;

namespace kiln::python {

void bind_context(py::module_& m) {
  m.attr("GRAPH_MODE") = int(GRAPH_MODE);
  m.attr("PYNATIVE_MODE") = int(PYNATIVE_MODE);

  py::class_<Context>(m, "Context")
      .def(py::init<>())
      .def_property(
          "mode", [](const Context& c) { return int(c.mode); },
          [](Context& c, int mode) {
            KILN_CHECK(mode == GRAPH_MODE || mode == PYNATIVE_MODE, "set_context: mode ", mode,
                       " is neither GRAPH_MODE (0) nor PYNATIVE_MODE (1)");
            c.mode = ExecutionMode(mode);
          })
      .def_readwrite("enable_graph_kernel", &Context::enable_graph_kernel)
      .def_readwrite("device_target", &Context::device_target)
      .def_readwrite("save_graphs_path", &Context::save_graphs_path)
      .def_readwrite("micro_batches", &Context::micro_batches)
      .def_readwrite("conv_algorithm", &Context::conv_algorithm);
  m.def("set_context", &set_context, py::arg("context"));
  m.def("get_context", &get_context);

  py::class_<AutoParallelContext>(m, "AutoParallelContext")
      .def(py::init<>())
      .def_property(
          "parallel_mode",
          [](const AutoParallelContext& c) { return parallel_mode_name(c.parallel_mode); },
          [](AutoParallelContext& c, const std::string& mode) {
            c.parallel_mode = parse_parallel_mode(mode);
          })
      .def_readwrite("gradients_mean", &AutoParallelContext::gradients_mean)
      .def_readwrite("device_num", &AutoParallelContext::device_num)
      .def_readwrite("global_rank", &AutoParallelContext::global_rank)
      .def_readwrite("bucket_cap_mb", &AutoParallelContext::bucket_cap_mb)
      .def_readwrite("first_bucket_cap_mb", &AutoParallelContext::first_bucket_cap_mb)
      .def_readwrite("dataset_shard_by_rank", &AutoParallelContext::dataset_shard_by_rank)
      .def_readwrite("search_mode", &AutoParallelContext::search_mode)
      .def_readwrite("memory_limit_mb", &AutoParallelContext::memory_limit_mb)
      .def_readwrite("op_times", &AutoParallelContext::op_times);
  m.def("set_auto_parallel_context", &set_auto_parallel_context, py::arg("context"));
  m.def("get_auto_parallel_context", &get_auto_parallel_context);
  m.def("reset_auto_parallel_context", &reset_auto_parallel_context);

  m.def(
      "set_seed", [](uint64_t seed) { set_seed(seed); }, py::arg("seed"));
  m.def("set_num_threads", &set_num_threads, py::arg("n"), "Threads of the kernels' pool");
  m.def("get_num_threads", &num_threads);

  py::module_ communication = m.def_submodule("communication");
  communication.def("init", &communication::init);
  communication.def("get_rank", &communication::get_rank);
  communication.def("get_group_size", &communication::get_group_size);
  communication.def("get_local_rank_size", &communication::get_local_rank_size);
}

}  // namespace kiln::python
