#include "dataset/python_source.h"

#include <pybind11/stl.h>

#include "kiln/core/error.h"

namespace kiln::python {

namespace {

// Calls `close()` on a reader object that has one; errors there are not worth a second failure.
void close_reader(PyHandle& object) {
  if (!object || !Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  try {
    if (py::hasattr(*object, "close")) object->attr("close")();
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("closing a GeneratorDataset reader");
  }
  object.reset();
}

class PythonReader : public data::SourceReader {
 public:
  PythonReader(PyHandle read, const PythonSource& source)
      : read_(std::move(read)),
        src_(source),
        many_(py::hasattr(*read_, "read_many")),
        ahead_(py::hasattr(*read_, "will_read")) {}
  ~PythonReader() override { close_reader(read_); }
  void read(int64_t index, std::vector<Tensor>& columns) override {
    py::gil_scoped_acquire gil;
    try {
      py::object row = (*read_)(index);
      row_from_python(row, src_.column_names().size(), columns, src_.name() + " row");
    } catch (py::error_already_set& e) {
      throw_python_error(e, src_.name() + " source");
    }
  }
  bool reads_many() const override { return many_; }
  // A reader backed by a worker process starts on the next block while this thread takes the
  // current one.
  void will_read(const std::vector<int64_t>& indices) override {
    if (!ahead_) return;
    py::gil_scoped_acquire gil;
    try {
      read_->attr("will_read")(indices);
    } catch (py::error_already_set& e) {
      throw_python_error(e, src_.name() + " source");
    }
  }
  // One call for a block of rows: a reader backed by a worker process makes one round trip.
  void read_many(const std::vector<int64_t>& indices, std::vector<data::Row>& rows) override {
    py::gil_scoped_acquire gil;
    try {
      py::list batch = read_->attr("read_many")(indices);
      if (size_t(py::len(batch)) != indices.size()) {
        throw Error(kiln::detail::concat(src_.name(), ": read_many returned ", py::len(batch),
                                         " rows for ", indices.size(), " indices"));
      }
      for (size_t k = 0; k < indices.size(); ++k) {
        row_from_python(batch[k], src_.column_names().size(), rows[k].columns,
                        kiln::detail::concat(src_.name(), " row ", indices[k]));
      }
    } catch (py::error_already_set& e) {
      throw_python_error(e, src_.name() + " source");
    }
  }

 private:
  PyHandle read_;
  const PythonSource& src_;
  bool many_;
  bool ahead_;
};

class PythonIteratorReader : public data::SequentialReader {
 public:
  PythonIteratorReader(PyHandle iterator, const PythonSource& source)
      : it_(std::move(iterator)), src_(source) {}
  ~PythonIteratorReader() override { close_reader(it_); }
  bool next(std::vector<Tensor>& columns) override {
    py::gil_scoped_acquire gil;
    py::object row = py::reinterpret_steal<py::object>(PyIter_Next(it_->ptr()));
    if (!row) {
      if (!PyErr_Occurred()) return false;
      py::error_already_set e;
      throw_python_error(e, src_.name() + " source");
    }
    try {
      row_from_python(row, src_.column_names().size(), columns, src_.name() + " row");
    } catch (py::error_already_set& e) {
      throw_python_error(e, src_.name() + " source");
    }
    return true;
  }

 private:
  PyHandle it_;
  const PythonSource& src_;
};

}  // namespace

PythonSource::PythonSource(std::string name, py::object factory, int64_t length,
                           std::vector<std::string> column_names)
    : name_(std::move(name)),
      factory_(hold(std::move(factory))),
      length_(length),
      columns_(std::move(column_names)) {
  if (columns_.empty()) throw Error(name_ + ": column_names is empty");
}

std::unique_ptr<data::SourceReader> PythonSource::make_reader() const {
  if (length_ < 0) throw Error(name_ + ": an iterable source has no random-access reader");
  py::gil_scoped_acquire gil;
  try {
    return std::make_unique<PythonReader>(hold((*factory_)()), *this);
  } catch (py::error_already_set& e) {
    throw_python_error(e, name_ + " source");
  }
}

std::unique_ptr<data::SequentialReader> PythonSource::make_sequential_reader() const {
  if (length_ >= 0) return data::Source::make_sequential_reader();
  py::gil_scoped_acquire gil;
  try {
    py::object it = (*factory_)();
    if (!PyIter_Check(it.ptr())) {
      throw Error(name_ + ": make_iterator returned a " +
                  std::string(py::str(py::type::of(it).attr("__name__"))) + ", not an iterator");
    }
    return std::make_unique<PythonIteratorReader>(hold(std::move(it)), *this);
  } catch (py::error_already_set& e) {
    throw_python_error(e, name_ + " source");
  }
}

}  // namespace kiln::python
