// RecordDataset as a pipeline source: columns and dtypes, shuffle modes, sharding semantics.
#include "kiln/data/record_dataset.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>

#include "kiln/data/config.h"
#include "record/record_test_util.h"
#include "testing/file_contents.h"

namespace kiln::data::record_dataset_test {
namespace {
using record::ElemType;
using record::Field;
using record::FieldType;
using record::FileWriter;
using record::Row;
using record::Value;
using record::testing::ScratchDir;

// `rows` rows over `shards` files; row i has id i, a float64, a 2x2 int32 array and a string.
std::vector<std::string> write_ids(const std::string& path, int rows, int shards) {
  FileWriter w(path, shards, {.page_size = 4096});
  w.add_schema({Field::scalar("id", FieldType::int64), Field::scalar("x", FieldType::float64),
                Field::array("a", ElemType::int32, {2, 2}), Field::scalar("s", FieldType::string)});
  std::vector<Row> batch;
  for (int i = 0; i < rows; ++i)
    batch.push_back(Row{{"id", int64_t(i) + (int64_t(1) << 40)},
                        {"x", i * 0.5},
                        {"a", Value::array<int32_t>({2, 2}, {i, -i, 2 * i, 7})},
                        {"s", "s" + std::to_string(i)}});
  w.write_raw_data(batch);
  w.commit();
  return w.paths();
}

// The ids of one epoch per call.
std::vector<std::vector<int64_t>> epochs_of(const Dataset& ds, int epochs) {
  auto it = ds.create_tuple_iterator({.columns = {"id"}, .num_epochs = epochs});
  std::vector<std::vector<int64_t>> out;
  for (int e = 0; e < epochs; ++e) {
    out.emplace_back();
    for (std::vector<Tensor> row; it.next(row);)
      out.back().push_back(row[0].item<int64_t>() - (int64_t(1) << 40));
  }
  return out;
}

TEST(RecordDataset, ColumnsBecomeTensorsOfTheRightTypes) {
  ScratchDir dir;
  auto files = write_ids(dir / "ids", 10, 2);
  RecordDataset ds(files[1], {"a", "x", "s", "id"}, {.shuffle = RecordShuffle::none});
  EXPECT_EQ(ds.get_col_names(), (std::vector<std::string>{"a", "x", "s", "id"}));
  EXPECT_EQ(ds.get_dataset_size(), 10);
  auto it = ds.create_tuple_iterator({.num_epochs = 1});
  std::vector<Tensor> row;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(it.next(row));
    EXPECT_EQ(row[0].dtype(), DType::i32);
    EXPECT_EQ(row[0].shape(), (Shape{2, 2}));
    EXPECT_EQ(row[0].to_vector<int32_t>(), (std::vector<int32_t>{i, -i, 2 * i, 7}));
    EXPECT_EQ(row[1].dtype(), DType::f32);
    EXPECT_EQ(row[1].item<float>(), float(i * 0.5));
    EXPECT_EQ(row[2].dtype(), DType::u8);
    std::string s(reinterpret_cast<const char*>(row[2].raw_data()), size_t(row[2].numel()));
    EXPECT_EQ(s, "s" + std::to_string(i));
    EXPECT_EQ(row[3].dtype(), DType::i64);
    EXPECT_EQ(row[3].item<int64_t>(), int64_t(i) + (int64_t(1) << 40));  // exact beyond 2^53
  }
  EXPECT_FALSE(it.next(row));
  EXPECT_THROW(RecordDataset(files[0], {"nope"}), Error);
}

TEST(RecordDataset, EveryShuffleModeCoversEveryRowOncePerEpochAcrossShards) {
  ScratchDir dir;
  auto files = write_ids(dir / "ids", 48, 3);
  for (RecordShuffle mode :
       {RecordShuffle::none, RecordShuffle::global, RecordShuffle::files, RecordShuffle::infile}) {
    SCOPED_TRACE(int(mode));
    const int num_shards = 4;
    std::vector<std::vector<std::vector<int64_t>>> per_shard;
    for (int k = 0; k < num_shards; ++k) {
      RecordDataset ds(files[0], {}, {.shuffle = mode, .num_shards = num_shards, .shard_id = k});
      EXPECT_EQ(ds.get_dataset_size(), 12);
      per_shard.push_back(epochs_of(ds, 2));
    }
    for (int e = 0; e < 2; ++e) {
      std::multiset<int64_t> seen;
      for (int k = 0; k < num_shards; ++k) {
        EXPECT_EQ(per_shard[size_t(k)][size_t(e)].size(), 12u);
        seen.insert(per_shard[size_t(k)][size_t(e)].begin(), per_shard[size_t(k)][size_t(e)].end());
      }
      std::multiset<int64_t> all;
      for (int i = 0; i < 48; ++i) all.insert(i);
      EXPECT_EQ(seen, all) << "epoch " << e;
    }
  }
}

TEST(RecordDataset, ShuffleModesOrderRowsAsDocumented) {
  ScratchDir dir;
  auto files = write_ids(dir / "ids", 60, 3);  // shard f holds ids f, f+3, f+6, ...
  config::set_seed(1234);
  auto none = epochs_of(RecordDataset(files[0], {}, {.shuffle = RecordShuffle::none}), 1)[0];
  std::vector<int64_t> written(60);
  std::iota(written.begin(), written.end(), 0);
  EXPECT_EQ(none, written);

  auto global = epochs_of(RecordDataset(files[0], {}, {.shuffle = RecordShuffle::global}), 2);
  EXPECT_NE(global[0], written);
  EXPECT_NE(global[0], global[1]);  // reshuffled each epoch

  // files: whole files one after another, each front to back; the file order varies by epoch.
  auto files_mode = epochs_of(RecordDataset(files[0], {}, {.shuffle = RecordShuffle::files}), 6);
  std::set<std::vector<int64_t>> file_orders;
  for (const auto& epoch : files_mode) {
    ASSERT_EQ(epoch.size(), 60u);
    std::vector<int64_t> order;
    for (size_t block = 0; block < 3; ++block) {
      int64_t shard = epoch[block * 20] % 3;
      order.push_back(shard);
      for (size_t j = 0; j < 20; ++j) EXPECT_EQ(epoch[block * 20 + j], shard + 3 * int64_t(j));
    }
    file_orders.insert(order);
  }
  EXPECT_GT(file_orders.size(), 1u);

  // infile: files in order, rows permuted inside each file.
  auto infile = epochs_of(RecordDataset(files[0], {}, {.shuffle = RecordShuffle::infile}), 1)[0];
  ASSERT_EQ(infile.size(), 60u);
  for (size_t j = 0; j < 60; ++j) EXPECT_EQ(infile[j] % 3, int64_t(j / 20));
  EXPECT_NE(infile,
            (epochs_of(RecordDataset(files[0], {}, {.shuffle = RecordShuffle::files}), 1)[0]));
}

TEST(RecordDataset, NumSamplesAndExplicitFileLists) {
  ScratchDir dir;
  auto files = write_ids(dir / "ids", 20, 4);
  RecordDataset few(files[0], {"id"}, {.shuffle = RecordShuffle::none, .num_samples = 7});
  EXPECT_EQ(few.get_dataset_size(), 7);
  EXPECT_EQ(epochs_of(few, 1)[0].size(), 7u);
  RecordDataset two(std::vector<std::string>{files[2], files[0]}, {"id"},
                    {.shuffle = RecordShuffle::none});
  EXPECT_EQ(epochs_of(two, 1)[0], (std::vector<int64_t>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18}));
  RecordDataset infile(std::vector<std::string>{files[3]}, {"id"},
                       {.shuffle = RecordShuffle::infile, .num_samples = 3});
  EXPECT_EQ(infile.get_dataset_size(), 3);
  EXPECT_EQ(epochs_of(infile, 1)[0].size(), 3u);
  EXPECT_THROW(RecordDataset(files[0], {}, {.num_shards = 2, .shard_id = 2}), Error);
}

TEST(RecordDataset, DamagedRecordsStopThePipelineWithTheFileAndOffset) {
  ScratchDir dir;
  auto files = write_ids(dir / "ids", 40, 1);
  auto bytes = kiln::testing::file_bytes(files[0]);
  auto shard = record::ShardReader::open(files[0]);
  uint64_t at = shard->entry(17).offset + 12;
  shard.reset();
  bytes[at] ^= 0x40;
  record::testing::write_file(files[0], bytes);
  RecordDataset ds(files[0], {}, {.shuffle = RecordShuffle::none});
  auto it = ds.create_tuple_iterator({.num_epochs = 1});
  try {
    for (std::vector<Tensor> row; it.next(row);) {
    }
    FAIL() << "the damaged row was read";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(files[0]), std::string::npos) << m;
    EXPECT_NE(m.find("checksum mismatch in row 17"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace kiln::data::record_dataset_test
