// kiln._kiln.dataset.Dataset (seam 3 of python/CONTRACT.md: every Python dataset's `_native`), its
// iterator and the pipeline settings. The GIL is released wherever the pipeline may wait, since
// its threads take the GIL to call Python sources and functions.
#include <pybind11/stl.h>

#include <optional>

#include "dataset/bind_dataset.h"
#include "dataset/python_call.h"
#include "kiln/core/error.h"
#include "kiln/data/config.h"
#include "kiln/data/dataset.h"

namespace kiln::python {

namespace {

// A TupleIterator that never joins the pipeline's threads while holding the GIL (they may be
// waiting for it).
class PipelineIterator {
 public:
  explicit PipelineIterator(data::TupleIterator it) : it_(std::move(it)) {}
  ~PipelineIterator() {
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      it_.reset();
    } else {
      it_.reset();
    }
  }

  // The next row as a tuple of numpy arrays viewing the row's tensors, or None at the epoch's end.
  py::object next() {
    if (!it_) throw Error("the iterator was stopped");
    bool more;
    {
      py::gil_scoped_release release;
      more = it_->next(row_);
    }
    if (!more) return py::none();
    py::tuple out = row_to_python(row_);
    row_.clear();
    return std::move(out);
  }

  void stop() {
    py::gil_scoped_release release;
    it_.reset();
  }

  std::vector<std::string> column_names() const { return it_ ? it_->column_names() : names(); }
  int64_t epoch() const { return it_ ? it_->epoch() : -1; }
  std::string summary() const { return it_ ? it_->summary() : std::string(); }

 private:
  std::vector<std::string> names() const { return {}; }
  std::optional<data::TupleIterator> it_;
  std::vector<Tensor> row_;
};

// While the consumer waits for a row: Python's signal handlers run here, so Ctrl-C raises
// KeyboardInterrupt out of next() instead of waiting for the pipeline.
void check_python_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

data::BatchOptions batch_options(
    int num_parallel_workers,
    const std::map<std::string, std::pair<std::vector<int64_t>, double>>& pad_info) {
  data::BatchOptions o;
  o.num_parallel_workers = num_parallel_workers < 1 ? 1 : num_parallel_workers;
  for (const auto& [column, pad] : pad_info) {
    o.pad_info[column] = data::PadInfo{Shape(pad.first), pad.second};
  }
  return o;
}

}  // namespace

void bind_pipeline(py::module_& m) {
  using py::arg;
  using Strings = std::vector<std::string>;
  py::class_<data::Dataset>(m, "Dataset",
                            "An immutable pipeline description; each iterator runs its own copy.")
      .def(
          "map",
          [](const data::Dataset& d, std::vector<std::shared_ptr<data::TensorTransform>> ops,
             Strings input_columns, Strings output_columns, int num_parallel_workers,
             int prefetch_size) {
            std::vector<data::Op> list(ops.begin(), ops.end());
            data::MapOptions o;
            o.num_parallel_workers = num_parallel_workers;
            o.prefetch_size = prefetch_size;
            return d.map(std::move(list), std::move(input_columns), std::move(output_columns), o);
          },
          arg("operations"), arg("input_columns") = Strings{}, arg("output_columns") = Strings{},
          arg("num_parallel_workers") = 0, arg("prefetch_size") = 0)
      .def("shuffle", &data::Dataset::shuffle, arg("buffer_size"))
      .def(
          "batch",
          [](const data::Dataset& d, int64_t batch_size, bool drop_remainder,
             int num_parallel_workers,
             const std::map<std::string, std::pair<std::vector<int64_t>, double>>& pad_info) {
            return d.batch(batch_size, drop_remainder,
                           batch_options(num_parallel_workers, pad_info));
          },
          arg("batch_size"), arg("drop_remainder") = false, arg("num_parallel_workers") = 1,
          arg("pad_info") = std::map<std::string, std::pair<std::vector<int64_t>, double>>{})
      .def("repeat", &data::Dataset::repeat, arg("count") = -1)
      .def("skip", &data::Dataset::skip, arg("count"))
      .def("take", &data::Dataset::take, arg("count"))
      .def("project", &data::Dataset::project, arg("columns"))
      .def("rename", &data::Dataset::rename, arg("input_columns"), arg("output_columns"))
      .def("zip", &data::Dataset::zip, arg("others"))
      .def("concat", &data::Dataset::concat, arg("others"))
      .def("get_dataset_size", &data::Dataset::get_dataset_size)
      .def("get_col_names", &data::Dataset::get_col_names)
      .def("get_batch_size", &data::Dataset::get_batch_size)
      .def("describe", &data::Dataset::describe)
      .def(
          "create_tuple_iterator",
          [](const data::Dataset& d, Strings columns, int64_t num_epochs) {
            data::IteratorOptions o;
            o.columns = std::move(columns);
            o.num_epochs = num_epochs;
            o.on_wait = check_python_signals;
            return std::make_unique<PipelineIterator>(d.create_tuple_iterator(o));
          },
          arg("columns") = Strings{}, arg("num_epochs") = -1);

  py::class_<PipelineIterator>(m, "TupleIterator")
      .def("next", &PipelineIterator::next,
           "The next row (a tuple of numpy arrays viewing the pipeline's tensors), or None at "
           "the end of an epoch")
      .def("stop", &PipelineIterator::stop, "Stops the pipeline and joins its threads")
      .def_property_readonly("column_names", &PipelineIterator::column_names)
      .def_property_readonly("epoch", &PipelineIterator::epoch)
      .def("summary", &PipelineIterator::summary);

  auto config = m.def_submodule("config", "Pipeline settings (MindSpore's dataset.config)");
  config.def("set_seed", &data::config::set_seed, arg("seed"));
  config.def("get_seed", &data::config::get_seed);
  config.def("set_prefetch_size", &data::config::set_prefetch_size, arg("size"));
  config.def("get_prefetch_size", &data::config::get_prefetch_size);
  config.def("set_num_parallel_workers", &data::config::set_num_parallel_workers, arg("num"));
  config.def("get_num_parallel_workers", &data::config::get_num_parallel_workers);
}

}  // namespace kiln::python
