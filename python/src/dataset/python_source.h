#pragma once
// A Python object as a source of the pipeline (GeneratorDataset's native half).
//
// Random access: `make_reader()` is called once per reader thread of each iterator and returns a
// callable `read(index) -> row`; iterable: `make_iterator()` is called at each epoch's start and
// returns a Python iterator of rows. Either result may have a `close()`, called when the reader
// is done (so a reader backed by a worker process stops it). The GIL is taken only around calls.
#include <cstdint>
#include <string>
#include <vector>

#include "dataset/python_call.h"
#include "kiln/data/source.h"

namespace kiln::python {

class PythonSource : public data::Source {
 public:
  // length >= 0: random access with `factory` = make_reader; length < 0: iterable with `factory`
  // = make_iterator.
  PythonSource(std::string name, py::object factory, int64_t length,
               std::vector<std::string> column_names);

  std::string name() const override { return name_; }
  std::vector<std::string> column_names() const override { return columns_; }
  int64_t num_rows() const override { return length_; }
  std::unique_ptr<data::SourceReader> make_reader() const override;
  std::unique_ptr<data::SequentialReader> make_sequential_reader() const override;

 private:
  std::string name_;
  PyHandle factory_;
  int64_t length_;
  std::vector<std::string> columns_;
};

}  // namespace kiln::python
