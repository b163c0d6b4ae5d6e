// The sources: Python objects (GeneratorDataset), in-memory arrays, MNIST files, image folders and
// record files. Keyword names and defaults are MindSpore's; python/kiln/dataset/ adds the classes.
#include <pybind11/stl.h>

#include <optional>

#include "dataset/bind_dataset.h"
#include "dataset/python_source.h"
#include "kiln/core/error.h"
#include "kiln/data/dataset.h"
#include "kiln/data/record_dataset.h"
#include "tensor_convert.h"

namespace kiln::python {

namespace {

data::SourceOptions source_options(int num_parallel_workers, std::optional<bool> shuffle,
                                   int64_t num_samples, int num_shards, int shard_id) {
  data::SourceOptions o;
  o.num_parallel_workers = num_parallel_workers;
  o.shuffle = shuffle;
  o.num_samples = num_samples;
  o.num_shards = num_shards;
  o.shard_id = shard_id;
  return o;
}

data::Dataset python_source(py::object factory, int64_t length,
                            std::vector<std::string> column_names, std::string name,
                            int num_parallel_workers, std::optional<bool> shuffle,
                            int64_t num_samples, int num_shards, int shard_id) {
  if (length < 0 && num_parallel_workers > 1) {
    throw Error(name +
                ": num_parallel_workers > 1 needs a random-access source (__getitem__ and "
                "__len__); an iterable one is read in one thread");
  }
  auto source = std::make_shared<PythonSource>(std::move(name), std::move(factory), length,
                                               std::move(column_names));
  return data::Dataset::from_source(
      std::move(source),
      source_options(num_parallel_workers, shuffle, num_samples, num_shards, shard_id));
}

data::Dataset numpy_slices(const std::vector<py::array>& arrays,
                           std::vector<std::string> column_names, int num_parallel_workers,
                           std::optional<bool> shuffle, int64_t num_samples, int num_shards,
                           int shard_id) {
  std::vector<Tensor> data;
  for (const auto& a : arrays) data.push_back(from_numpy(a, /*copy=*/false));
  return data::NumpySlicesDataset(
      std::move(data), std::move(column_names),
      source_options(num_parallel_workers, shuffle, num_samples, num_shards, shard_id));
}

data::Dataset mnist(std::string dataset_dir, bool fashion, std::string usage,
                    int num_parallel_workers, std::optional<bool> shuffle, int64_t num_samples,
                    int num_shards, int shard_id) {
  data::MnistOptions o;
  o.usage = usage.empty() ? "all" : usage;
  o.num_parallel_workers = num_parallel_workers;
  o.shuffle = shuffle;
  o.num_samples = num_samples;
  o.num_shards = num_shards;
  o.shard_id = shard_id;
  if (fashion) return data::FashionMnistDataset(std::move(dataset_dir), o);
  return data::MnistDataset(std::move(dataset_dir), o);
}

data::Dataset image_folder(std::string dataset_dir, bool decode,
                           std::vector<std::string> extensions,
                           std::map<std::string, int> class_indexing, int num_parallel_workers,
                           std::optional<bool> shuffle, int64_t num_samples, int num_shards,
                           int shard_id) {
  data::ImageFolderOptions o;
  o.decode = decode;
  o.extensions = std::move(extensions);
  o.class_indexing = std::move(class_indexing);
  o.num_parallel_workers = num_parallel_workers;
  o.shuffle = shuffle;
  o.num_samples = num_samples;
  o.num_shards = num_shards;
  o.shard_id = shard_id;
  return data::ImageFolderDataset(std::move(dataset_dir), o);
}

data::Dataset record(std::vector<std::string> files, std::vector<std::string> columns,
                     int num_parallel_workers, std::string shuffle, int64_t num_samples,
                     int num_shards, int shard_id, bool verify_checksums) {
  if (files.empty()) throw Error("MindDataset: dataset_files is empty");
  data::RecordDatasetOptions o;
  o.num_parallel_workers = num_parallel_workers;
  o.shuffle = data::record_shuffle_from_name(shuffle);
  o.num_samples = num_samples;
  o.num_shards = num_shards;
  o.shard_id = shard_id;
  o.verify_checksums = verify_checksums;
  if (files.size() == 1) return data::RecordDataset(files[0], std::move(columns), o);
  return data::RecordDataset(files, std::move(columns), o);
}

}  // namespace

void bind_sources(py::module_& m) {
  using py::arg;
  m.def("python_source", &python_source, arg("factory"), arg("length"), arg("column_names"),
        arg("name") = "GeneratorDataset", arg("num_parallel_workers") = 0,
        arg("shuffle") = py::none(), arg("num_samples") = 0, arg("num_shards") = 0,
        arg("shard_id") = 0,
        "A Python source: length >= 0 calls factory() per reader thread for a read(index) "
        "callable; length < 0 calls factory() per epoch for an iterator of rows.");
  m.def("numpy_slices", &numpy_slices, arg("arrays"), arg("column_names"),
        arg("num_parallel_workers") = 0, arg("shuffle") = py::none(), arg("num_samples") = 0,
        arg("num_shards") = 0, arg("shard_id") = 0,
        "Arrays sliced along their first dimension; rows view the arrays (no copy).");
  m.def("mnist", &mnist, arg("dataset_dir"), arg("fashion") = false, arg("usage") = "all",
        arg("num_parallel_workers") = 0, arg("shuffle") = py::none(), arg("num_samples") = 0,
        arg("num_shards") = 0, arg("shard_id") = 0);
  m.def("image_folder", &image_folder, arg("dataset_dir"), arg("decode") = false,
        arg("extensions") = std::vector<std::string>{},
        arg("class_indexing") = std::map<std::string, int>{}, arg("num_parallel_workers") = 0,
        arg("shuffle") = py::none(), arg("num_samples") = 0, arg("num_shards") = 0,
        arg("shard_id") = 0);
  m.def("record", &record, arg("dataset_files"), arg("columns_list") = std::vector<std::string>{},
        arg("num_parallel_workers") = 0, arg("shuffle") = "global", arg("num_samples") = 0,
        arg("num_shards") = 0, arg("shard_id") = 0, arg("verify_checksums") = true);
  m.attr("DEBIAN_FASHION_MNIST_DIR") = data::kDebianFashionMnistDir;
}

}  // namespace kiln::python
