#include "kiln/data/record_dataset.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <random>

#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/data/config.h"
#include "kiln/data/source_registry.h"

namespace kiln::data {
namespace {
using record::ElemType;
using record::FieldType;
using record::FieldView;
using record::RecordReader;

DType tensor_dtype(ElemType e) {
  switch (e) {
    case ElemType::uint8:
      return DType::u8;
    case ElemType::int32:
      return DType::i32;
    case ElemType::int64:
      return DType::i64;
    case ElemType::float16:
      return DType::f16;
    case ElemType::bfloat16:
      return DType::bf16;
    case ElemType::float32:
    case ElemType::float64:
    case ElemType::none:
      return DType::f32;
  }
  return DType::f32;
}

Tensor field_tensor(const FieldView& v) {
  switch (v.field->type) {
    case FieldType::int32: {
      Tensor t = Tensor::empty(Shape{}, DType::i32);
      std::memcpy(t.raw_data(), v.data.data(), 4);
      return t;
    }
    case FieldType::int64: {
      Tensor t = Tensor::empty(Shape{}, DType::i64);
      std::memcpy(t.raw_data(), v.data.data(), 8);
      return t;
    }
    case FieldType::float32: {
      Tensor t = Tensor::empty(Shape{}, DType::f32);
      std::memcpy(t.raw_data(), v.data.data(), 4);
      return t;
    }
    case FieldType::float64: {
      Tensor t = Tensor::empty(Shape{}, DType::f32);
      *t.data<float>() = float(v.as_double());
      return t;
    }
    case FieldType::string:
    case FieldType::bytes: {
      Tensor t = Tensor::empty(Shape{int64_t(v.data.size())}, DType::u8);
      if (!v.data.empty()) std::memcpy(t.raw_data(), v.data.data(), v.data.size());
      return t;
    }
    case FieldType::ndarray: {
      Shape shape(v.shape());
      Tensor t = Tensor::empty(shape, tensor_dtype(v.field->elem));
      if (v.field->elem == ElemType::float64) {
        float* out = t.data<float>();
        for (int64_t i = 0, n = v.numel(); i < n; ++i) {
          double d;
          std::memcpy(&d, v.data.data() + i * 8, 8);
          out[i] = float(d);
        }
      } else if (!v.data.empty()) {
        std::memcpy(t.raw_data(), v.data.data(), v.data.size());
      }
      return t;
    }
  }
  return {};
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

class RecordSource : public Source {
 public:
  RecordSource(std::shared_ptr<RecordReader> reader, std::vector<std::string> columns,
               RecordDatasetOptions options)
      : reader_(std::move(reader)), options_(options) {
    const auto& schema = reader_->schema();
    if (columns.empty())
      for (const auto& f : schema.fields()) columns.push_back(f.name);
    for (const auto& c : columns) {
      int i = schema.find(c);
      if (i < 0)
        throw Error(kiln::detail::concat("RecordDataset: column '", c, "' is not a field of ",
                                         reader_->shard(0).path(), " (fields:\n", schema.str(),
                                         ")"));
      fields_.push_back(i);
    }
    columns_ = std::move(columns);
    sequential_ =
        options.shuffle == RecordShuffle::files || options.shuffle == RecordShuffle::infile;
  }

  std::string name() const override { return "RecordDataset"; }
  std::vector<std::string> column_names() const override { return columns_; }
  int64_t num_rows() const override {
    if (!sequential_) return int64_t(reader_->num_rows());
    return int64_t(sampled(reader_->num_rows()));
  }
  bool random_access() const override { return !sequential_; }
  int default_workers() const override { return std::min(2, std::max(1, available_cores())); }

  std::string describe(int64_t index) const override {
    if (index < 0 || uint64_t(index) >= reader_->num_rows())
      return "row " + std::to_string(index) + " of RecordDataset";
    auto at = reader_->locate(uint64_t(index));
    return kiln::detail::concat("row ", index, " (", reader_->shard(at.shard).path(),
                                ", local row ", at.local_row, ")");
  }

  std::unique_ptr<SourceReader> make_reader() const override {
    struct Reader : SourceReader {
      const RecordSource* s;
      record::RowView view;
      void read(int64_t index, std::vector<Tensor>& columns) override {
        s->reader_->read(uint64_t(index), view);
        record_row_to_tensors(view, s->fields_, columns);
      }
    };
    auto r = std::make_unique<Reader>();
    r->s = this;
    return r;
  }

  std::unique_ptr<SequentialReader> make_sequential_reader() const override {
    struct Reader : SequentialReader {
      const RecordSource* s;
      std::vector<uint64_t> order;
      size_t pos = 0;
      record::RowView view;
      bool next(std::vector<Tensor>& columns) override {
        if (pos >= order.size()) return false;
        s->reader_->read(order[pos++], view);
        record_row_to_tensors(view, s->fields_, columns);
        return true;
      }
    };
    auto r = std::make_unique<Reader>();
    r->s = this;
    r->order = epoch_order(epoch_.fetch_add(1));
    return r;
  }

 private:
  uint64_t sampled(uint64_t n) const {
    if (options_.num_shards > 1)
      n = (n + uint64_t(options_.num_shards) - 1) / uint64_t(options_.num_shards);
    if (options_.num_samples > 0) n = std::min<uint64_t>(n, uint64_t(options_.num_samples));
    return n;
  }

  // files / infile order of one epoch, then the same sharding and sampling as the engine's.
  std::vector<uint64_t> epoch_order(uint64_t epoch) const {
    std::mt19937_64 rng(mix(config::get_seed(), epoch + 1));
    size_t k = reader_->num_shards();
    std::vector<size_t> files(k);
    std::iota(files.begin(), files.end(), size_t(0));
    if (options_.shuffle == RecordShuffle::files) std::shuffle(files.begin(), files.end(), rng);
    std::vector<uint64_t> all;
    all.reserve(size_t(reader_->num_rows()));
    for (size_t f : files) {
      size_t begin = all.size();
      for (uint64_t l = 0; l < reader_->shard(f).num_rows(); ++l)
        all.push_back(reader_->row_of(f, l));
      if (options_.shuffle == RecordShuffle::infile)
        std::shuffle(all.begin() + std::ptrdiff_t(begin), all.end(), rng);
    }
    std::vector<uint64_t> order;
    uint64_t n = all.size();
    if (options_.num_shards > 1 && n > 0) {
      uint64_t s = uint64_t(options_.num_shards), per = (n + s - 1) / s;
      order.resize(size_t(per));
      for (uint64_t j = 0; j < per; ++j) order[j] = all[(uint64_t(options_.shard_id) + j * s) % n];
    } else {
      order = std::move(all);
    }
    if (options_.num_samples > 0 && order.size() > uint64_t(options_.num_samples))
      order.resize(size_t(options_.num_samples));
    return order;
  }

  std::shared_ptr<RecordReader> reader_;
  RecordDatasetOptions options_;
  std::vector<std::string> columns_;
  std::vector<int> fields_;
  bool sequential_ = false;
  mutable std::atomic<uint64_t> epoch_{0};
};

Dataset make_dataset(std::shared_ptr<RecordReader> reader, std::vector<std::string> columns,
                     const RecordDatasetOptions& o) {
  if (o.num_shards < 0 || (o.num_shards > 0 && (o.shard_id < 0 || o.shard_id >= o.num_shards)) ||
      (o.num_shards == 0 && o.shard_id != 0))
    throw Error(kiln::detail::concat("RecordDataset: shard_id ", o.shard_id,
                                     " must be in [0, num_shards) with num_shards ", o.num_shards));
  if (o.num_samples < 0)
    throw Error(
        kiln::detail::concat("RecordDataset: num_samples must be >= 0, got ", o.num_samples));
  auto source = std::make_shared<RecordSource>(std::move(reader), std::move(columns), o);
  SourceOptions so;
  so.num_parallel_workers = o.num_parallel_workers;
  if (source->random_access()) {
    so.shuffle = o.shuffle == RecordShuffle::global;
    so.num_samples = o.num_samples;
    so.num_shards = o.num_shards;
    so.shard_id = o.shard_id;
  } else {
    so.shuffle = false;  // the source shuffles, shards and samples itself
    so.num_parallel_workers = 0;
  }
  return Dataset::from_source(std::move(source), so);
}

record::ReaderOptions reader_options(const RecordDatasetOptions& o) {
  return {.verify_checksums = o.verify_checksums,
          // Not MADV_RANDOM for global shuffles: it turns off fault-around, and each 4 KiB page
          // fault then costs more than reading the record.
          .access = o.shuffle == RecordShuffle::global ? record::Access::normal
                                                       : record::Access::sequential};
}

}  // namespace

void record_row_to_tensors(const record::RowView& row, const std::vector<int>& fields,
                           std::vector<Tensor>& out) {
  out.clear();
  out.reserve(fields.size());
  for (int f : fields) out.push_back(field_tensor(row[size_t(f)]));
}

RecordShuffle record_shuffle_from_name(const std::string& name) {
  if (name == "global" || name == "true") return RecordShuffle::global;
  if (name == "files") return RecordShuffle::files;
  if (name == "infile") return RecordShuffle::infile;
  if (name == "none" || name == "false") return RecordShuffle::none;
  throw Error("RecordDataset: unknown shuffle mode '" + name + "' (global, files, infile or none)");
}

Dataset record_source(const std::string& arg, const SourceOptions& so) {
  std::string list = arg;
  RecordShuffle mode = so.shuffle.value_or(true) ? RecordShuffle::global : RecordShuffle::none;
  if (auto colon = list.rfind(':'); colon != std::string::npos) {
    std::string suffix = list.substr(colon + 1);
    if (suffix == "global" || suffix == "files" || suffix == "infile" || suffix == "none") {
      mode = record_shuffle_from_name(suffix);
      list.resize(colon);
    }
  }
  std::vector<std::string> files;
  for (size_t begin = 0; begin <= list.size();) {
    size_t comma = list.find(',', begin);
    if (comma == std::string::npos) comma = list.size();
    if (comma > begin) files.push_back(list.substr(begin, comma - begin));
    begin = comma + 1;
  }
  if (files.empty())
    throw Error("record: give the files: record:FILE[,FILE...][:global|files|infile|none]");
  RecordDatasetOptions o{.num_parallel_workers = so.num_parallel_workers,
                         .shuffle = mode,
                         .num_samples = so.num_samples,
                         .num_shards = so.num_shards,
                         .shard_id = so.shard_id};
  // Tools that take a source by name treat the first column as the image (as the other
  // image sources order them), and file names would not batch: image and label first.
  auto reader = files.size() == 1 ? std::make_shared<RecordReader>(files[0])
                                  : std::make_shared<RecordReader>(files);
  std::vector<std::string> columns;
  if (reader->schema().find("image") >= 0 && reader->schema().find("label") >= 0)
    columns = {"image", "label"};
  if (files.size() == 1) return RecordDataset(files[0], columns, o);
  return RecordDataset(files, columns, o);
}

RecordDataset::RecordDataset(const std::string& file, std::vector<std::string> columns,
                             RecordDatasetOptions options)
    : Dataset(make_dataset(std::make_shared<RecordReader>(file, reader_options(options)),
                           std::move(columns), options)) {}

RecordDataset::RecordDataset(const std::vector<std::string>& files,
                             std::vector<std::string> columns, RecordDatasetOptions options)
    : Dataset(make_dataset(std::make_shared<RecordReader>(files, reader_options(options)),
                           std::move(columns), options)) {}

}  // namespace kiln::data
