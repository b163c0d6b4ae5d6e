// Source::gather_rows: a batch that reads an in-memory source directly copies its rows out of the
// arrays (the source's thread hands it row numbers only), and gives the same batches, in the same
// order, as rows read one by one and collated.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "kiln/core/error.h"
#include "kiln/data/dataset.h"
#include "kiln/data/text_dataset.h"

namespace kiln::data::gather_rows_test {
namespace {

constexpr int64_t kRows = 53;

// Three columns over arrays: x f32 [3] per row (contiguous), t i32 [4] per row read from a
// transposed array (strided rows), y i64 scalars. Counts its reads and gathers.
class ArraySource : public Source {
 public:
  ArraySource(bool gathers, bool gather_fails = false)
      : gathers_(gathers), gather_fails_(gather_fails) {
    std::vector<float> x(kRows * 3);
    std::vector<int32_t> t(4 * kRows);
    std::vector<int64_t> y(kRows);
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t k = 0; k < 3; ++k) x[size_t(i * 3 + k)] = float(i) + 0.25f * float(k);
      for (int64_t k = 0; k < 4; ++k) t[size_t(k * kRows + i)] = int32_t(1000 * k + i);
      y[size_t(i)] = 7 * i;
    }
    const Tensor xs = Tensor::from_vector(x, Shape{kRows, 3});
    const Tensor ts = Tensor::from_vector(t, Shape{4, kRows});  // row i is column i
    const Tensor ys = Tensor::from_vector(y, Shape{kRows});
    columns_ = {{xs, Shape{3}, Strides{1}, 0, 3},
                {ts, Shape{4}, Strides{kRows}, 0, 1},
                {ys, Shape{}, Strides{}, 0, 1}};
  }
  std::string name() const override { return "ArraySource"; }
  std::vector<std::string> column_names() const override { return {"x", "t", "y"}; }
  int64_t num_rows() const override { return kRows; }
  std::unique_ptr<SourceReader> make_reader() const override {
    struct Reader : SourceReader {
      const ArraySource* s;
      void read(int64_t index, std::vector<Tensor>& columns) override {
        ++s->reads;
        for (const ArrayRows& c : s->columns_) columns.push_back(c.row(index));
      }
    };
    auto r = std::make_unique<Reader>();
    r->s = this;
    return r;
  }
  bool gathers_rows() const override { return gathers_; }
  void gather_rows(const std::vector<int64_t>& indices,
                   std::vector<Tensor>& columns) const override {
    ++gathers;
    if (gather_fails_) throw Error("the arrays are gone");
    for (const ArrayRows& c : columns_) columns.push_back(c.gather(indices));
  }

  mutable std::atomic<int64_t> reads{0}, gathers{0};

 private:
  bool gathers_, gather_fails_;
  std::vector<ArrayRows> columns_;
};

// Every batch of two epochs, each column flattened to doubles, with its shape.
struct Batches {
  std::vector<std::vector<double>> values;
  std::vector<Shape> shapes;
};

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> out;
  if (t.dtype() == DType::f32) {
    for (float v : t.to_vector<float>()) out.push_back(v);
  } else {
    for (int64_t v : t.to_vector<int64_t>()) out.push_back(double(v));
  }
  return out;
}

Batches two_epochs(const Dataset& ds) {
  Batches out;
  auto it = ds.create_tuple_iterator({.num_epochs = 2});
  for (int epoch = 0; epoch < 2; ++epoch) {  // next() is false at each epoch's end
    for (std::vector<Tensor> row; it.next(row);) {
      for (const Tensor& column : row) {
        out.shapes.push_back(column.shape());
        out.values.push_back(as_doubles(column));
      }
    }
  }
  return out;
}

TEST(GatherRows, BatchesEqualRowsReadOneByOneAndCollated) {
  for (int batch_workers : {1, 3}) {
    for (bool drop_remainder : {false, true}) {
      SCOPED_TRACE("batch workers " + std::to_string(batch_workers) + ", drop_remainder " +
                   std::to_string(drop_remainder));
      auto batches = [&](const std::shared_ptr<ArraySource>& source) {
        return two_epochs(
            Dataset::from_source(source, {.shuffle = true, .num_shards = 2, .shard_id = 1})
                .rename({"x"}, {"features"})
                .batch(5, drop_remainder, {.num_parallel_workers = batch_workers}));
      };
      auto gathering = std::make_shared<ArraySource>(true);
      auto reading = std::make_shared<ArraySource>(false);
      const Batches gathered = batches(gathering);
      const Batches collated = batches(reading);
      EXPECT_EQ(gathering->reads.load(), 0) << "a gathering source's rows were read one by one";
      EXPECT_GT(gathering->gathers.load(), 0);
      EXPECT_EQ(reading->gathers.load(), 0);
      EXPECT_GT(reading->reads.load(), 0);
      // 27 rows per epoch in shard 1 of 2: five batches of 5 and one of 2 (dropped or not).
      ASSERT_EQ(collated.shapes.size(), size_t(3 * 2 * (drop_remainder ? 5 : 6)));
      EXPECT_EQ(gathered.shapes, collated.shapes);
      EXPECT_EQ(gathered.values, collated.values);
      EXPECT_EQ(collated.shapes[0], (Shape{5, 3}));
      EXPECT_EQ(collated.shapes[1], (Shape{5, 4}));
      EXPECT_EQ(collated.shapes[2], (Shape{5}));
    }
  }
}

TEST(GatherRows, AStageBetweenSourceAndBatchReadsRows) {
  auto source = std::make_shared<ArraySource>(true);
  const Batches skipped =
      two_epochs(Dataset::from_source(source, {.shuffle = false}).skip(0).batch(8));
  EXPECT_EQ(source->gathers.load(), 0);
  EXPECT_EQ(source->reads.load(), 2 * kRows);
  auto direct = std::make_shared<ArraySource>(true);
  EXPECT_EQ(two_epochs(Dataset::from_source(direct, {.shuffle = false}).batch(8)).values,
            skipped.values);
  EXPECT_EQ(direct->reads.load(), 0);
}

TEST(GatherRows, AFailedGatherNamesTheBatchTheRowsAndTheSourcesMessage) {
  auto source = std::make_shared<ArraySource>(true, /*gather_fails=*/true);
  try {
    two_epochs(Dataset::from_source(source, {.shuffle = false}).batch(4));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(
        m.find("failed to gather 4 rows (the first: row 0 of ArraySource): the arrays are gone"),
        std::string::npos)
        << m;
  }
}

TEST(GatherRows, FashionMnistBatchesEqualItsRowsCollated) {
  if (!std::filesystem::exists(std::string(kDebianFashionMnistDir) +
                               "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  auto first_batches = [](const Dataset& ds) {
    Batches out;
    auto it = ds.create_tuple_iterator({.num_epochs = 1});
    std::vector<Tensor> row;
    for (int b = 0; b < 3 && it.next(row); ++b) {
      for (const Tensor& column : row) {
        out.shapes.push_back(column.shape());
        out.values.push_back(as_doubles(column));
      }
    }
    return out;
  };
  const FashionMnistDataset train("", {.usage = "test", .shuffle = true});
  const Batches gathered = first_batches(train.batch(64));
  const Batches collated = first_batches(train.skip(0).batch(64));  // skip reads rows whole
  ASSERT_EQ(gathered.shapes.size(), 6u);
  EXPECT_EQ(gathered.shapes[0], (Shape{64, 28, 28, 1}));
  EXPECT_EQ(gathered.shapes, collated.shapes);
  EXPECT_EQ(gathered.values, collated.values);
}

TEST(GatherRows, TextWindowBatchesEqualTheirRowsCollated) {
  auto corpus = std::make_shared<const TextCorpus>(read_text_corpus(kDefaultTextCorpus));
  TextWindowOptions o{.context_length = 16, .begin = 100, .end = 5000, .stride = 3};
  o.source.shuffle = true;
  const Dataset windows = TextWindowDataset(corpus, o);
  const Batches gathered = two_epochs(windows.batch(8));
  const Batches collated = two_epochs(windows.skip(0).batch(8));
  ASSERT_FALSE(gathered.shapes.empty());
  EXPECT_EQ(gathered.shapes[0], (Shape{8, 16}));
  EXPECT_EQ(gathered.shapes, collated.shapes);
  EXPECT_EQ(gathered.values, collated.values);
  // The targets are the tokens one on.
  EXPECT_EQ(std::vector<double>(gathered.values[0].begin() + 1, gathered.values[0].begin() + 16),
            std::vector<double>(gathered.values[1].begin(), gathered.values[1].begin() + 15));
}

}  // namespace
}  // namespace kiln::data::gather_rows_test
