// MnistDataset / FashionMnistDataset: IDX files (gzipped or not) read once into memory.
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "kiln/core/error.h"
#include "kiln/data/dataset.h"
#include "kiln/data/idx.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

std::string find_file(const std::string& dir, const std::string& base, const char* dataset) {
  for (const std::string& name : {base, base + ".gz"}) {
    fs::path p = fs::path(dir) / name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  std::string hint = std::string(dataset) == "FashionMnistDataset"
                         ? "install Debian's copy (apt-get install dataset-fashion-mnist) or pass "
                           "the directory that holds the IDX files"
                         : "pass the directory that holds the IDX files";
  throw FileError(std::string(dataset) + ": cannot find " + base + " or " + base + ".gz in " + dir +
                  ": " + hint);
}

struct MnistData {
  Tensor images;  // u8 [N, 28, 28, 1]
  Tensor labels;  // i32 [N]
};

MnistData load_split(const std::string& dir, const std::string& prefix, const char* dataset) {
  std::string img_path = find_file(dir, prefix + "-images-idx3-ubyte", dataset);
  std::string lbl_path = find_file(dir, prefix + "-labels-idx1-ubyte", dataset);
  IdxArray img = read_idx(img_path, 3);
  IdxArray lbl = read_idx(lbl_path, 1);
  if (img.dims[0] != lbl.dims[0]) {
    throw FileError(kiln::detail::concat(dataset, ": ", img_path, " has ", img.dims[0],
                                         " images but ", lbl_path, " has ", lbl.dims[0],
                                         " labels"));
  }
  MnistData d;
  d.images =
      img.data.view_as(Shape{img.dims[0], img.dims[1], img.dims[2], 1},
                       contiguous_strides(Shape{img.dims[0], img.dims[1], img.dims[2], 1}), 0);
  d.labels = Tensor::empty(Shape{lbl.dims[0]}, DType::i32);
  const uint8_t* src = lbl.data.data<uint8_t>();
  int32_t* dst = d.labels.data<int32_t>();
  for (int64_t i = 0; i < lbl.dims[0]; ++i) dst[i] = src[i];
  return d;
}

// Loads each split once per process (tests and benchmarks build many datasets).
std::shared_ptr<const MnistData> load_cached(const std::string& dir, const std::string& usage,
                                             const char* dataset) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const MnistData>> cache;
  std::string key = fs::absolute(dir).lexically_normal().string() + "|" + usage;
  std::lock_guard<std::mutex> lock(mu);
  if (auto hit = cache[key].lock()) return hit;
  std::shared_ptr<const MnistData> data;
  if (usage == "train" || usage == "test") {
    data = std::make_shared<const MnistData>(
        load_split(dir, usage == "train" ? "train" : "t10k", dataset));
  } else {
    MnistData a = load_split(dir, "train", dataset), b = load_split(dir, "t10k", dataset);
    if (a.images.shape()[1] != b.images.shape()[1] || a.images.shape()[2] != b.images.shape()[2]) {
      throw FileError(kiln::detail::concat(dataset, ": train images are ", a.images.shape().str(),
                                           " but test images are ", b.images.shape().str()));
    }
    int64_t n = a.images.dim(0) + b.images.dim(0);
    MnistData all;
    all.images = Tensor::empty(Shape{n, a.images.dim(1), a.images.dim(2), 1}, DType::u8);
    std::memcpy(all.images.raw_data(), a.images.raw_data(), a.images.nbytes());
    std::memcpy(static_cast<char*>(all.images.raw_data()) + a.images.nbytes(), b.images.raw_data(),
                b.images.nbytes());
    all.labels = Tensor::empty(Shape{n}, DType::i32);
    std::memcpy(all.labels.raw_data(), a.labels.raw_data(), a.labels.nbytes());
    std::memcpy(static_cast<char*>(all.labels.raw_data()) + a.labels.nbytes(), b.labels.raw_data(),
                b.labels.nbytes());
    data = std::make_shared<const MnistData>(std::move(all));
  }
  cache[key] = data;
  return data;
}

class MnistSource : public ArraySource {
 public:
  MnistSource(std::shared_ptr<const MnistData> data, std::string name, std::string dir)
      : data_(std::move(data)), name_(std::move(name)), dir_(std::move(dir)) {
    const Shape& s = data_->images.shape();
    const Shape image{s[1], s[2], 1};
    array_columns_ = {
        {data_->images, image, contiguous_strides(image), data_->images.offset(), image.numel()},
        {data_->labels, Shape{}, Strides{}, data_->labels.offset(), 1}};
  }
  std::string name() const override { return name_; }
  std::vector<std::string> column_names() const override { return {"image", "label"}; }
  int64_t num_rows() const override { return data_->images.dim(0); }
  std::string describe(int64_t index) const override {
    return "row " + std::to_string(index) + " of " + name_ + " (" + dir_ + ")";
  }

 private:
  std::shared_ptr<const MnistData> data_;
  std::string name_, dir_;
};

Dataset make_mnist(std::string dir, const MnistOptions& o, const char* name) {
  if (o.usage != "train" && o.usage != "test" && o.usage != "all") {
    throw Error(std::string(name) + ": usage must be \"train\", \"test\" or \"all\", got \"" +
                o.usage + "\"");
  }
  if (dir.empty()) throw Error(std::string(name) + ": dataset_dir is empty");
  SourceOptions so;
  so.num_parallel_workers = o.num_parallel_workers;
  so.shuffle = o.shuffle;
  so.num_samples = o.num_samples;
  so.num_shards = o.num_shards;
  so.shard_id = o.shard_id;
  return Dataset::from_source(
      std::make_shared<MnistSource>(load_cached(dir, o.usage, name), name, dir), so);
}

}  // namespace

MnistDataset::MnistDataset(std::string dataset_dir, MnistOptions options)
    : Dataset(make_mnist(std::move(dataset_dir), options, "MnistDataset")) {}

MnistDataset::MnistDataset(std::string dataset_dir, MnistOptions options, const char* name)
    : Dataset(make_mnist(std::move(dataset_dir), options, name)) {}

FashionMnistDataset::FashionMnistDataset(std::string dataset_dir, MnistOptions options)
    : MnistDataset(dataset_dir.empty() ? std::string(kDebianFashionMnistDir) : dataset_dir, options,
                   "FashionMnistDataset") {}

}  // namespace kiln::data
