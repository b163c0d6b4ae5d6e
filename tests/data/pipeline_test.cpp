// Stages of the pipeline engine against hand-computed results.
#include <algorithm>
#include <numeric>
#include <set>

#include "data_test_util.h"
#include "kiln/core/error.h"
#include "kiln/data/config.h"
#include "kiln/data/transforms.h"
#include "kiln/data/vision.h"

namespace kiln::data::pipeline_test {
namespace {

using testing::range_dataset;
using testing::run_values;

std::vector<int64_t> iota(int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t i = lo; i < hi; ++i) v.push_back(i);
  return v;
}

transforms::Lambda times(int k) {
  return transforms::Lambda("Times" + std::to_string(k), [k](const Tensor& t) {
    Tensor o = Tensor::empty(t.shape(), DType::i32);
    o.data<int32_t>()[0] = t.data<int32_t>()[0] * k;
    return o;
  });
}

TEST(Pipeline, SourceInOrderWithoutShuffle) {
  EXPECT_EQ(run_values(range_dataset(100)), iota(0, 100));
  EXPECT_EQ(range_dataset(100).get_dataset_size(), 100);
  EXPECT_EQ(range_dataset(7).get_col_names(), std::vector<std::string>{"x"});
}

TEST(Pipeline, MapAppliesOperationsInOrder) {
  auto plus1 = transforms::Lambda("Plus1", [](const Tensor& t) {
    return Tensor::scalar(double(t.item<int32_t>() + 1), DType::i32);
  });
  // (i + 1) * 3, not i * 3 + 1.
  auto ds = range_dataset(50).map({plus1, times(3)}, {"x"}, {}, {.num_parallel_workers = 3});
  std::vector<int64_t> want;
  for (int64_t i = 0; i < 50; ++i) want.push_back((i + 1) * 3);
  EXPECT_EQ(run_values(ds), want);
}

TEST(Pipeline, MapColumnsReplaceAndRename) {
  auto two = GeneratorDataset(
      [](int64_t i) {
        return std::vector<Tensor>{Tensor::scalar(double(i), DType::i32),
                                   Tensor::scalar(double(100 + i), DType::i32)};
      },
      5, {"a", "b"}, {.shuffle = false});
  // Map "b" to "c": columns become [a, c].
  auto ds = two.map({times(2)}, {"b"}, {"c"});
  EXPECT_EQ(ds.get_col_names(), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(run_values(ds, 1), (std::vector<int64_t>{200, 202, 204, 206, 208}));
  // A transform that splits one column into two.
  struct Split : TensorTransform {
    std::string name() const override { return "Split"; }
    void apply(std::vector<Tensor>& cols, RowRng&) const override {
      int32_t v = cols[0].item<int32_t>();
      cols = {Tensor::scalar(v / 10, DType::i32), Tensor::scalar(v % 10, DType::i32)};
    }
  };
  auto split = two.map({Split()}, {"b"}, {"tens", "ones"});
  EXPECT_EQ(split.get_col_names(), (std::vector<std::string>{"a", "tens", "ones"}));
  EXPECT_EQ(run_values(split, 2), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(run_values(split, 1), (std::vector<int64_t>{10, 10, 10, 10, 10}));
  // Wrong output count is reported at run time, naming the stage.
  auto bad = two.map({Split()}, {"b"}, {"only_one"});
  try {
    run_values(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("map[Split]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("output_columns"), std::string::npos) << e.what();
  }
  auto renamed = two.rename({"a"}, {"z"});
  EXPECT_EQ(renamed.get_col_names(), (std::vector<std::string>{"z", "b"}));
  EXPECT_EQ(run_values(renamed, 0), iota(0, 5));
}

TEST(Pipeline, ProjectReordersAndDrops) {
  auto two = GeneratorDataset(
      [](int64_t i) {
        return std::vector<Tensor>{Tensor::scalar(double(i), DType::i32),
                                   Tensor::scalar(double(-i), DType::i32)};
      },
      4, {"a", "b"}, {.shuffle = false});
  auto ds = two.project({"b"});
  EXPECT_EQ(ds.get_col_names(), std::vector<std::string>{"b"});
  EXPECT_EQ(run_values(ds), (std::vector<int64_t>{0, -1, -2, -3}));
  auto swapped = two.project({"b", "a"});
  EXPECT_EQ(run_values(swapped, 1), iota(0, 4));
}

TEST(Pipeline, BatchCopiesRowsAndHonoursDropRemainder) {
  auto ds = range_dataset(10).batch(4);
  EXPECT_EQ(ds.get_dataset_size(), 3);
  auto it = ds.create_tuple_iterator({.num_epochs = 1});
  std::vector<Tensor> row;
  std::vector<std::vector<int32_t>> batches;
  while (it.next(row)) {
    EXPECT_EQ(row[0].rank(), 1);
    batches.push_back(row[0].to_vector<int32_t>());
  }
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(batches[2], (std::vector<int32_t>{8, 9}));
  auto dropped = range_dataset(10).batch(4, true, {.num_parallel_workers = 2});
  EXPECT_EQ(dropped.get_dataset_size(), 2);
  EXPECT_EQ(run_values(dropped), iota(0, 8));
}

TEST(Pipeline, BatchOfImagesHasLeadingBatchDim) {
  auto imgs = GeneratorDataset(
      [](int64_t i) {
        Tensor t = Tensor::full(Shape{2, 3, 1}, double(i), DType::f32);
        return std::vector<Tensor>{t, Tensor::scalar(double(i % 3), DType::i32)};
      },
      6, {"image", "label"}, {.shuffle = false});
  auto it = imgs.batch(3).create_tuple_iterator();
  std::vector<Tensor> row;
  ASSERT_TRUE(it.next(row));
  EXPECT_EQ(row[0].shape(), (Shape{3, 2, 3, 1}));
  EXPECT_EQ(row[1].shape(), (Shape{3}));
  EXPECT_EQ(row[1].dtype(), DType::i32);
  auto v = row[0].to_vector<float>();
  EXPECT_EQ(v[0], 0.f);
  EXPECT_EQ(v[6], 1.f);
  EXPECT_EQ(v[17], 2.f);
}

TEST(Pipeline, BatchPadsWithPadInfo) {
  // Row i is a vector of length i + 1 holding i + 1.
  auto ragged = GeneratorDataset(
      [](int64_t i) {
        return std::vector<Tensor>{Tensor::full(Shape{i + 1}, double(i + 1), DType::i32)};
      },
      3, {"v"}, {.shuffle = false});
  auto it = ragged.batch(3, false, {.pad_info = {{"v", PadInfo{{}, -1}}}}).create_tuple_iterator();
  std::vector<Tensor> row;
  ASSERT_TRUE(it.next(row));
  EXPECT_EQ(row[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(row[0].to_vector<int32_t>(), (std::vector<int32_t>{1, -1, -1, 2, 2, -1, 3, 3, 3}));
  auto fixed = ragged.batch(3, false, {.pad_info = {{"v", PadInfo{Shape{5}, 0}}}});
  auto it2 = fixed.create_tuple_iterator();
  ASSERT_TRUE(it2.next(row));
  EXPECT_EQ(row[0].shape(), (Shape{3, 5}));
  // Without pad_info, different shapes are an error naming the column.
  try {
    run_values(ragged.batch(3));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("column 'v'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pad_info"), std::string::npos) << e.what();
  }
}

TEST(Pipeline, RepeatSkipTake) {
  EXPECT_EQ(run_values(range_dataset(3).repeat(3)),
            (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(range_dataset(3).repeat(3).get_dataset_size(), 9);
  EXPECT_EQ(run_values(range_dataset(10).skip(7)), iota(7, 10));
  EXPECT_EQ(range_dataset(10).skip(7).get_dataset_size(), 3);
  EXPECT_EQ(run_values(range_dataset(10).take(4)), iota(0, 4));
  EXPECT_EQ(range_dataset(10).take(4).get_dataset_size(), 4);
  // take then repeat: the first 2 rows, three times.
  EXPECT_EQ(run_values(range_dataset(10).take(2).repeat(3)),
            (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
  // Repeating an empty input forever is an error, not a hang.
  testing::run_with_timeout(
      20, [] { EXPECT_THROW(run_values(range_dataset(10).skip(10).repeat(-1)), Error); });
  // batch then repeat keeps the partial batch of each pass.
  EXPECT_EQ(range_dataset(5).batch(2).repeat(2).get_dataset_size(), 6);
  EXPECT_EQ(run_values(range_dataset(5).batch(2).repeat(2)),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
}

TEST(Pipeline, ZipAndConcat) {
  auto a = range_dataset(5);
  auto b = range_dataset(3).map({times(10)}).rename({"x"}, {"y"});
  auto z = zip({a, b});
  EXPECT_EQ(z.get_col_names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(z.get_dataset_size(), 3);
  EXPECT_EQ(run_values(z, 0), iota(0, 3));
  EXPECT_EQ(run_values(z, 1), (std::vector<int64_t>{0, 10, 20}));
  EXPECT_THROW(a.zip({a}), Error);  // duplicate column names
  auto c = a + range_dataset(2).map({times(-1)});
  EXPECT_EQ(c.get_dataset_size(), 7);
  EXPECT_EQ(run_values(c), (std::vector<int64_t>{0, 1, 2, 3, 4, 0, -1}));
  EXPECT_THROW(a.concat({b}), Error);  // different columns
  // Two epochs through zip and concat.
  auto it = c.create_tuple_iterator({.num_epochs = 2});
  EXPECT_EQ(testing::column_values(it).size(), 7u);
  EXPECT_EQ(testing::column_values(it).size(), 7u);
  EXPECT_TRUE(testing::column_values(it).empty());
}

TEST(Pipeline, ShuffleBufferIsAPermutationAndSeeded) {
  config::set_seed(11);
  auto ds = range_dataset(200).shuffle(16);
  auto first = run_values(ds);
  auto sorted = first;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(0, 200));
  EXPECT_NE(first, iota(0, 200));
  EXPECT_EQ(run_values(ds), first);  // same seed, same order
  // A buffer of 16 moves a row at most ~16 places early.
  for (size_t i = 0; i < first.size(); ++i) EXPECT_LE(first[i], int64_t(i) + 16);
  config::set_seed(12);
  EXPECT_NE(run_values(ds), first);
  config::set_seed(5489);
}

TEST(Pipeline, EpochsAndDictIterator) {
  auto ds = range_dataset(4).map({times(2)}, {"x"}, {"double"});
  auto it = ds.create_dict_iterator({.num_epochs = 3});
  std::map<std::string, Tensor> row;
  for (int epoch = 0; epoch < 3; ++epoch) {
    int n = 0;
    while (it.next(row)) {
      EXPECT_EQ(row.count("double"), 1u);
      EXPECT_EQ(row["double"].item<int32_t>(), 2 * n);
      ++n;
    }
    EXPECT_EQ(n, 4);
    EXPECT_EQ(it.epoch(), epoch + 1);
  }
  EXPECT_FALSE(it.next(row));
  // Column selection on the tuple iterator.
  auto t = zip({range_dataset(2), range_dataset(2).rename({"x"}, {"y"})})
               .create_tuple_iterator({.columns = {"y"}});
  std::vector<Tensor> r;
  ASSERT_TRUE(t.next(r));
  EXPECT_EQ(r.size(), 1u);
  EXPECT_THROW(range_dataset(2).create_tuple_iterator({.columns = {"nope"}}), Error);
}

TEST(Pipeline, RangeForOverOneEpoch) {
  auto it = range_dataset(6).batch(2).create_tuple_iterator({.num_epochs = 1});
  int batches = 0;
  for (const auto& row : it) {
    EXPECT_EQ(row[0].numel(), 2);
    ++batches;
  }
  EXPECT_EQ(batches, 3);
}

TEST(Pipeline, MapNeverOverwritesMemoryTheSourceLent) {
  // The source lends f32 rows straight from a user's buffer; flips may work in place only on
  // tensors a transform made.
  auto buffer = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  auto lent = GeneratorDataset(
      [buffer](int64_t i) {
        return std::vector<Tensor>{
            Tensor::from_blob(buffer->data() + 3 * i, Shape{1, 3, 1}, DType::f32, buffer)};
      },
      2, {"image"}, {.shuffle = false});
  auto ds = lent.map({vision::RandomHorizontalFlip(1.0), vision::RandomVerticalFlip(1.0),
                      vision::RandomHorizontalFlip(1.0), vision::Rescale(2, 0)});
  auto it = ds.create_tuple_iterator();
  std::vector<Tensor> row;
  ASSERT_TRUE(it.next(row));
  EXPECT_EQ(row[0].to_vector<float>(), (std::vector<float>{2, 4, 6}));  // flipped twice: as is
  ASSERT_TRUE(it.next(row));
  EXPECT_EQ(row[0].to_vector<float>(), (std::vector<float>{8, 10, 12}));
  EXPECT_EQ(*buffer, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // One flip, in place on the copy Rescale made.
  auto once = lent.map({vision::Rescale(1, 0), vision::RandomHorizontalFlip(1.0)});
  EXPECT_EQ(testing::run_values(once), (std::vector<int64_t>{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(*buffer, (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(Pipeline, BadArgumentsFailAtConstructionNamingTheArgument) {
  auto expect_msg = [](auto fn, const std::string& word) {
    try {
      fn();
      ADD_FAILURE() << "expected an error mentioning " << word;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  auto ds = range_dataset(10);
  expect_msg([&] { ds.batch(0); }, "batch_size");
  expect_msg([&] { range_dataset(10, {.num_shards = 2, .shard_id = 2}); }, "shard_id");
  expect_msg([&] { range_dataset(10, {.num_shards = 2, .shard_id = -1}); }, "shard_id");
  expect_msg([&] { ds.map({times(2)}, {"missing"}); }, "missing");
  expect_msg([&] { ds.project({"missing"}); }, "missing");
  expect_msg([&] { ds.shuffle(0); }, "buffer_size");
  expect_msg([&] { ds.repeat(0); }, "count");
  expect_msg([&] { ds.batch(2, false, {.pad_info = {{"nope", {}}}}); }, "pad_info");
  expect_msg([&] { ds.rename({"x"}, {}); }, "output_columns");
  expect_msg([&] { ds.map({times(2)}, {}, {}, {.num_parallel_workers = -1}); },
             "num_parallel_workers");
  auto empty_stream = [] {
    return GeneratorDataset::Next([](std::vector<Tensor>&) { return false; });
  };
  expect_msg([&] { GeneratorDataset(empty_stream, {"x"}, {.num_shards = 2}); }, "num_shards");
  expect_msg([&] { GeneratorDataset(empty_stream, {"x"}, {.shuffle = true}); }, "shuffle");
}

}  // namespace
}  // namespace kiln::data::pipeline_test
