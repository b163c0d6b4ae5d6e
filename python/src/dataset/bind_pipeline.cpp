// kiln._kiln.dataset.Dataset (seam 3 of python/CONTRACT.md: every Python dataset's `_native`), its
// iterator and the pipeline settings. The GIL is released wherever the pipeline may wait, since
// its threads take the GIL to call Python sources and functions.
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>

#include "dataset/bind_dataset.h"
#include "dataset/python_call.h"
#include "kiln/core/error.h"
#include "kiln/data/config.h"
#include "kiln/data/dataset.h"
#include "tensor_convert.h"

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

// MindSpore's per_batch_map(col_1, ..., col_k, batch_info) on the batch stage's threads: each
// input column as a list of numpy arrays (views of the rows), results as k lists of arrays.
data::PerBatchMap python_per_batch_map(py::object fn, const data::Dataset& d,
                                       const std::vector<std::string>& input_columns,
                                       py::object batch_info_type) {
  const std::vector<std::string> names = d.get_col_names();
  std::vector<size_t> picked;
  for (const std::string& c : input_columns.empty() ? names : input_columns) {
    auto at = std::find(names.begin(), names.end(), c);
    if (at == names.end()) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      throw Error("batch: per_batch_map's input column '" + c +
                  "' is not a column of the data set (" + known + ")");
    }
    picked.push_back(size_t(at - names.begin()));
  }
  // The batch stage names the stage, the batch and the epoch in front of this.
  const std::string what =
      "function " + py::str(py::getattr(fn, "__qualname__", py::repr(fn))).cast<std::string>();
  PyHandle call = hold(std::move(fn)), info_type = hold(std::move(batch_info_type));
  return [call, info_type, picked, what](std::vector<std::vector<Tensor>>& columns,
                                         const data::BatchInfo& info) {
    py::gil_scoped_acquire gil;
    try {
      py::list args;
      for (size_t c : picked) {
        py::list rows;
        for (const Tensor& t : columns[c]) rows.append(to_numpy(t));
        args.append(std::move(rows));
      }
      args.append((*info_type)(info.batch_num, info.epoch_num));
      py::object result = (*call)(*args);
      py::tuple out =
          py::isinstance<py::tuple>(result) ? py::tuple(result) : py::make_tuple(result);
      if (out.size() != picked.size()) {
        throw Error(kiln::detail::concat(what, " returned ", out.size(), " values for ",
                                         picked.size(), " input columns"));
      }
      for (size_t k = 0; k < picked.size(); ++k) {
        std::vector<Tensor>& column = columns[picked[k]];
        column.clear();
        for (py::handle row : py::reinterpret_borrow<py::iterable>(out[k])) {
          column.push_back(tensor_from_python(row, what + " result"));
        }
      }
    } catch (py::error_already_set& e) {
      throw_python_error(e, what);
    }
  };
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
             const std::map<std::string, std::pair<std::vector<int64_t>, double>>& pad_info,
             py::object per_batch_map, Strings input_columns, py::object batch_info_type) {
            data::BatchOptions o = batch_options(num_parallel_workers, pad_info);
            if (!per_batch_map.is_none()) {
              o.per_batch_map = python_per_batch_map(std::move(per_batch_map), d, input_columns,
                                                     std::move(batch_info_type));
            }
            return d.batch(batch_size, drop_remainder, std::move(o));
          },
          arg("batch_size"), arg("drop_remainder") = false, arg("num_parallel_workers") = 1,
          arg("pad_info") = std::map<std::string, std::pair<std::vector<int64_t>, double>>{},
          arg("per_batch_map") = py::none(), arg("input_columns") = Strings{},
          arg("batch_info_type") = py::none())
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
