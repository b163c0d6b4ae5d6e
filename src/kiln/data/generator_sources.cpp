// GeneratorDataset and NumpySlicesDataset: user functions and in-memory arrays as sources.
#include "kiln/core/error.h"
#include "kiln/data/dataset.h"

namespace kiln::data {
namespace {

SourceOptions to_source_options(const GeneratorOptions& o) {
  SourceOptions s;
  s.num_parallel_workers = o.num_parallel_workers;
  s.shuffle = o.shuffle;
  s.num_samples = o.num_samples;
  s.num_shards = o.num_shards;
  s.shard_id = o.shard_id;
  return s;
}

class GetItemSource : public Source {
 public:
  GetItemSource(GeneratorDataset::GetItem fn, int64_t length, std::vector<std::string> columns)
      : fn_(std::move(fn)), length_(length), columns_(std::move(columns)) {}
  std::string name() const override { return "GeneratorDataset"; }
  std::vector<std::string> column_names() const override { return columns_; }
  int64_t num_rows() const override { return length_; }
  std::unique_ptr<SourceReader> make_reader() const override {
    struct Reader : SourceReader {
      const GeneratorDataset::GetItem* fn;
      void read(int64_t index, std::vector<Tensor>& columns) override { columns = (*fn)(index); }
    };
    auto r = std::make_unique<Reader>();
    r->fn = &fn_;
    return r;
  }

 private:
  GeneratorDataset::GetItem fn_;
  int64_t length_;
  std::vector<std::string> columns_;
};

class IterableSource : public Source {
 public:
  IterableSource(GeneratorDataset::MakeIterable make, std::vector<std::string> columns)
      : make_(std::move(make)), columns_(std::move(columns)) {}
  std::string name() const override { return "GeneratorDataset"; }
  std::vector<std::string> column_names() const override { return columns_; }
  int64_t num_rows() const override { return -1; }
  std::unique_ptr<SequentialReader> make_sequential_reader() const override {
    struct Reader : SequentialReader {
      GeneratorDataset::Next next_fn;
      bool next(std::vector<Tensor>& columns) override { return next_fn(columns); }
    };
    auto r = std::make_unique<Reader>();
    r->next_fn = make_();
    if (!r->next_fn) throw Error("GeneratorDataset: make_iterable returned an empty function");
    return r;
  }

 private:
  GeneratorDataset::MakeIterable make_;
  std::vector<std::string> columns_;
};

class SlicesSource : public ArraySource {
 public:
  SlicesSource(std::vector<Tensor> data, std::vector<std::string> columns)
      : data_(std::move(data)), columns_(std::move(columns)) {
    if (data_.size() != columns_.size()) {
      throw Error(kiln::detail::concat("NumpySlicesDataset: ", data_.size(), " arrays but ",
                                       columns_.size(), " column_names"));
    }
    if (data_.empty()) throw Error("NumpySlicesDataset: data is empty");
    for (size_t i = 0; i < data_.size(); ++i) {
      const Tensor& t = data_[i];
      if (!t.defined() || t.rank() < 1) {
        throw Error("NumpySlicesDataset: column '" + columns_[i] +
                    "' must be an array of rank >= 1, got " + kiln::describe(t));
      }
      if (t.dim(0) != data_[0].dim(0)) {
        throw Error(kiln::detail::concat("NumpySlicesDataset: column '", columns_[i], "' has ",
                                         t.dim(0), " rows but column '", columns_[0], "' has ",
                                         data_[0].dim(0)));
      }
      Shape s(std::vector<int64_t>(t.shape().begin() + 1, t.shape().end()));
      Strides st(t.strides().begin() + 1, t.strides().end());
      array_columns_.push_back({t, std::move(s), std::move(st), t.offset(), t.strides()[0]});
    }
  }
  std::string name() const override { return "NumpySlicesDataset"; }
  std::vector<std::string> column_names() const override { return columns_; }
  int64_t num_rows() const override { return data_[0].dim(0); }

 private:
  std::vector<Tensor> data_;
  std::vector<std::string> columns_;
};

}  // namespace

GeneratorDataset::GeneratorDataset(GetItem get_item, int64_t length,
                                   std::vector<std::string> column_names, GeneratorOptions options)
    : Dataset([&] {
        if (!get_item) throw Error("GeneratorDataset: get_item is empty");
        if (length < 0) {
          throw Error(kiln::detail::concat("GeneratorDataset: length must be >= 0, got ", length));
        }
        if (column_names.empty()) throw Error("GeneratorDataset: column_names is empty");
        return from_source(
            std::make_shared<GetItemSource>(std::move(get_item), length, std::move(column_names)),
            to_source_options(options));
      }()) {}

GeneratorDataset::GeneratorDataset(MakeIterable make_iterable,
                                   std::vector<std::string> column_names, GeneratorOptions options)
    : Dataset([&] {
        if (!make_iterable) throw Error("GeneratorDataset: make_iterable is empty");
        if (column_names.empty()) throw Error("GeneratorDataset: column_names is empty");
        if (options.num_parallel_workers > 1) {
          throw Error(
              "GeneratorDataset: num_parallel_workers > 1 needs a random-access "
              "generator (get_item, length); an iterable one runs in one thread");
        }
        return from_source(
            std::make_shared<IterableSource>(std::move(make_iterable), std::move(column_names)),
            to_source_options(options));
      }()) {}

NumpySlicesDataset::NumpySlicesDataset(std::vector<Tensor> data,
                                       std::vector<std::string> column_names, SourceOptions options)
    : Dataset(from_source(std::make_shared<SlicesSource>(std::move(data), std::move(column_names)),
                          options)) {}

}  // namespace kiln::data
