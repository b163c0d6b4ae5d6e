// Writer -> reader round trips: every field type, random access, shards, field lookups.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <thread>

#include "kiln/record/file_writer.h"
#include "kiln/record/record_reader.h"
#include "kiln/record/verify.h"
#include "record_test_util.h"

namespace kiln::record::record_roundtrip_test {
namespace {
using testing::ScratchDir;

std::vector<Field> all_types_schema() {
  return {Field::scalar("i32", FieldType::int32),
          Field::scalar("i64", FieldType::int64),
          Field::scalar("f32", FieldType::float32),
          Field::scalar("f64", FieldType::float64),
          Field::scalar("text", FieldType::string),
          Field::scalar("raw", FieldType::bytes),
          Field::array("img", ElemType::uint8, {2, 3}),
          Field::array("ints", ElemType::int32, {-1}),
          Field::array("longs", ElemType::int64, {2, -1}),
          Field::array("halfs", ElemType::float16, {-1, 2}),
          Field::array("floats", ElemType::float32, {-1, -1}),
          Field::array("doubles", ElemType::float64, {})};
}

// Row i of the all-types set; every value is derived from i so the reader can recompute it.
Row all_types_row(int i) {
  std::vector<uint8_t> img(6), raw(size_t(i % 4));
  for (size_t k = 0; k < img.size(); ++k) img[k] = uint8_t(i + int(k));
  for (size_t k = 0; k < raw.size(); ++k) raw[k] = uint8_t(255 - k);
  std::vector<int32_t> ints(size_t(i % 3));
  for (size_t k = 0; k < ints.size(); ++k) ints[k] = -i * int32_t(k + 1);
  std::vector<int64_t> longs(2 * size_t(i % 2 + 1), int64_t(1) << 40 | i);
  std::vector<uint8_t> halfs(4 * size_t(i % 2 + 1), uint8_t(i));  // (n, 2) float16 = 4n bytes
  std::vector<float> floats(size_t(i % 2 + 1) * 3);
  for (size_t k = 0; k < floats.size(); ++k) floats[k] = float(i) + 0.25f * float(k);
  return Row{{"i32", int32_t(-i)},
             {"i64", int64_t(i) * 3000000000ll},
             {"f32", float(i) * 1.5f},
             {"f64", double(i) / 3.0},
             {"text", std::string(size_t(i % 5), char('a' + i % 26))},
             {"raw", Value::bytes(raw)},
             {"img", Value::bytes({})},  // replaced below
             {"ints", Value::array<int32_t>({int64_t(ints.size())}, ints)},
             {"longs", Value::array<int64_t>({2, int64_t(i % 2 + 1)}, longs)},
             {"halfs", Value::array(ElemType::float16, {int64_t(i % 2 + 1), 2}, halfs)},
             {"floats", Value::array<float>({int64_t(i % 2 + 1), 3}, floats)},
             {"doubles", Value::array<double>({}, {double(i) * 0.1})}}
      .set("img", Value::array(ElemType::uint8, {2, 3}, img));
}

template <class T>
T load(const FieldView& v, size_t k = 0) {
  T x;
  std::memcpy(&x, v.data.data() + k * sizeof(T), sizeof(T));
  return x;
}

void expect_all_types_row(const RowView& v, int i) {
  ASSERT_EQ(v.fields.size(), 12u);
  EXPECT_EQ(v[0].as_int(), -i);
  EXPECT_EQ(v[1].as_int(), int64_t(i) * 3000000000ll);
  EXPECT_EQ(v[2].as_double(), double(float(i) * 1.5f));
  EXPECT_EQ(v[3].as_double(), double(i) / 3.0);
  EXPECT_EQ(v[4].as_string(), std::string(size_t(i % 5), char('a' + i % 26)));
  ASSERT_EQ(v[5].data.size(), size_t(i % 4));
  for (size_t k = 0; k < v[5].data.size(); ++k) EXPECT_EQ(v[5].data[k], uint8_t(255 - k));
  EXPECT_EQ(v[6].shape(), (std::vector<int64_t>{2, 3}));
  for (size_t k = 0; k < 6; ++k) EXPECT_EQ(v[6].data[k], uint8_t(i + int(k)));
  EXPECT_EQ(v[7].shape(), (std::vector<int64_t>{i % 3}));
  for (size_t k = 0; k < size_t(i % 3); ++k) EXPECT_EQ(load<int32_t>(v[7], k), -i * int32_t(k + 1));
  EXPECT_EQ(v[8].shape(), (std::vector<int64_t>{2, i % 2 + 1}));
  EXPECT_EQ(load<int64_t>(v[8], 1), int64_t(1) << 40 | i);
  EXPECT_EQ(v[9].shape(), (std::vector<int64_t>{i % 2 + 1, 2}));
  EXPECT_EQ(v[9].data.size(), 4u * size_t(i % 2 + 1));
  EXPECT_EQ(v[10].shape(), (std::vector<int64_t>{i % 2 + 1, 3}));
  for (size_t k = 0; k < size_t(v[10].numel()); ++k)
    EXPECT_EQ(load<float>(v[10], k), float(i) + 0.25f * float(k));
  EXPECT_EQ(v[11].rank, 0);
  EXPECT_EQ(load<double>(v[11]), double(i) * 0.1);
}

TEST(RecordRoundTrip, EveryFieldTypeSurvives) {
  ScratchDir dir;
  const int n = 50;
  {
    FileWriter writer(dir / "all.krec", 1, {.page_size = 4096});
    writer.add_schema(all_types_schema());
    writer.add_index({"i32", "f64", "text"});
    std::vector<Row> rows;
    for (int i = 0; i < n; ++i) rows.push_back(all_types_row(i));
    writer.write_raw_data(rows);
    writer.commit();
  }
  RecordReader reader(dir / "all.krec");
  EXPECT_EQ(reader.num_rows(), uint64_t(n));
  Schema expected(all_types_schema());
  for (int f : {0, 3, 4}) expected.set_indexed(size_t(f), true);
  EXPECT_EQ(reader.schema(), expected);
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE(i);
    expect_all_types_row(reader.read(uint64_t(i)), i);
  }
  EXPECT_TRUE(verify_records(dir / "all.krec").ok());
}

TEST(RecordRoundTrip, RandomAccessEqualsSequentialOrderAcrossShards) {
  ScratchDir dir;
  auto paths = testing::write_small_set(dir / "set", 103, 4);
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(paths[2], dir / "set2");
  RecordReader reader(paths[2]);  // any one shard finds its siblings
  ASSERT_EQ(reader.num_rows(), 103u);
  std::vector<std::string> sequential;
  for (uint64_t r = 0; r < reader.num_rows(); ++r) {
    auto v = reader.read(r);
    sequential.push_back(std::string(v[1].as_string()));
    EXPECT_EQ(v[1].as_string(), "row-" + std::to_string(r));  // written order
  }
  std::mt19937 rng(3);
  for (int k = 0; k < 300; ++k) {
    uint64_t r = rng() % reader.num_rows();
    EXPECT_EQ(reader.read(r)[1].as_string(), sequential[r]);
  }
  EXPECT_THROW(reader.read(103), Error);
}

TEST(RecordRoundTrip, RowsAreDealtRoundRobinOverShards) {
  ScratchDir dir;
  auto paths = testing::write_small_set(dir / "set", 10, 4);
  std::vector<uint64_t> counts;
  for (const auto& p : paths) {
    auto s = ShardReader::open(p);
    counts.push_back(s->num_rows());
    EXPECT_EQ(s->header().total_rows, 10u);
    RowView v;
    for (uint64_t l = 0; l < s->num_rows(); ++l) {
      s->read(l, v);
      EXPECT_EQ(v[1].as_string(), "row-" + std::to_string(l * 4 + s->header().shard_index));
    }
  }
  EXPECT_EQ(counts, (std::vector<uint64_t>{3, 3, 2, 2}));
}

TEST(RecordRoundTrip, SubsetOfShardsInterleavesTheirRows) {
  ScratchDir dir;
  auto paths = testing::write_small_set(dir / "set", 10, 4);
  RecordReader reader(std::vector<std::string>{paths[3], paths[1]});
  ASSERT_EQ(reader.num_rows(), 5u);  // shard 1: rows 1, 5, 9; shard 3: rows 3, 7
  std::vector<std::string> names;
  for (uint64_t r = 0; r < 5; ++r) names.emplace_back(reader.read(r)[1].as_string());
  EXPECT_EQ(names, (std::vector<std::string>{"row-1", "row-3", "row-5", "row-7", "row-9"}));
}

TEST(RecordRoundTrip, LookupByIndexedField) {
  ScratchDir dir;
  auto paths = testing::write_small_set(dir / "set", 97, 3);
  RecordReader reader(paths[0]);
  for (int label = 0; label < 6; ++label) {
    std::vector<uint64_t> expected;
    for (uint64_t r = 0; r < 97; ++r)
      if (int(r % 5) == label) expected.push_back(r);
    EXPECT_EQ(reader.find("label", label), expected) << label;
    for (uint64_t r : reader.find("label", label)) EXPECT_EQ(reader.read(r)[0].as_int(), label);
  }
  EXPECT_EQ(reader.find("name", "row-42"), (std::vector<uint64_t>{42}));
  EXPECT_TRUE(reader.find("name", "row-420").empty());
  EXPECT_THROW(reader.find("blob", "x"), Error);   // not indexed
  EXPECT_THROW(reader.find("nothing", 1), Error);  // no such field
}

TEST(RecordRoundTrip, FloatKeysFoldSignedZeroAndOrderNegatives) {
  ScratchDir dir;
  FileWriter writer(dir / "f.krec");
  writer.add_schema({Field::scalar("x", FieldType::float64)});
  writer.add_index({"x"});
  writer.write_raw_data(
      {Row{{"x", -0.0}}, Row{{"x", 0.0}}, Row{{"x", -2.5}}, Row{{"x", 1e300}}, Row{{"x", -2.5}}});
  writer.commit();
  RecordReader reader(dir / "f.krec");
  EXPECT_EQ(reader.find("x", 0.0), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(reader.find("x", -2.5), (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(reader.find("x", 1e300), (std::vector<uint64_t>{3}));
  EXPECT_LT(index_key_float(-3), index_key_float(-2.5));
  EXPECT_LT(index_key_float(-2.5), index_key_float(0));
  EXPECT_LT(index_key_float(0), index_key_float(1e-300));
  EXPECT_LT(index_key_int(-1), index_key_int(0));
}

TEST(RecordRoundTrip, RecordsLargerThanAPageSpanSeveralPages) {
  ScratchDir dir;
  FileWriter writer(dir / "big.krec", 2, {.page_size = 4096});
  writer.add_schema({Field::scalar("data", FieldType::bytes)});
  std::vector<size_t> sizes = {10, 5000, 4096 - 32, 4096 - 31, 20000, 3, 70000, 1};
  std::vector<Row> rows;
  for (size_t i = 0; i < sizes.size(); ++i)
    rows.push_back(Row{{"data", Value::bytes(std::vector<uint8_t>(sizes[i], uint8_t(i + 1)))}});
  writer.write_raw_data(rows);
  writer.commit();
  RecordReader reader(dir / "big.krec0");
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto v = reader.read(i);
    ASSERT_EQ(v[0].data.size(), sizes[i]);
    EXPECT_TRUE(std::all_of(v[0].data.begin(), v[0].data.end(),
                            [&](uint8_t b) { return b == uint8_t(i + 1); }));
  }
  auto report = verify_records(dir / "big.krec0");
  EXPECT_TRUE(report.ok()) << (report.problems.empty() ? "" : report.problems[0]);
  EXPECT_EQ(report.rows_checked, sizes.size());
}

TEST(RecordRoundTrip, ManyBatchesAndEmptySets) {
  ScratchDir dir;
  {
    FileWriter writer(dir / "batches", 3, {.page_size = 4096});
    writer.add_schema(testing::small_schema());
    for (int b = 0; b < 20; ++b) {
      std::vector<Row> rows;
      for (int i = 0; i < b; ++i) rows.push_back(testing::small_row(b * 100 + i));
      writer.write_raw_data(rows);
    }
    EXPECT_EQ(writer.rows_written(), 190u);
    writer.commit();
    EXPECT_THROW(writer.write_raw_data({testing::small_row(0)}), Error);
  }
  RecordReader reader(dir / "batches1");
  EXPECT_EQ(reader.num_rows(), 190u);
  EXPECT_EQ(reader.read(0)[1].as_string(), "row-100");
  EXPECT_EQ(reader.read(189)[1].as_string(), "row-1918");

  FileWriter empty(dir / "empty", 2);
  empty.add_schema(testing::small_schema());
  empty.commit();
  RecordReader empty_reader(dir / "empty0");
  EXPECT_EQ(empty_reader.num_rows(), 0u);
  EXPECT_TRUE(verify_records(dir / "empty1").ok());
}

TEST(RecordRoundTrip, ConcurrentWritersKeepEachBatchTogether) {
  ScratchDir dir;
  FileWriter writer(dir / "mt", 2, {.page_size = 4096});
  writer.add_schema(
      {Field::scalar("thread", FieldType::int32), Field::scalar("i", FieldType::int32)});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int b = 0; b < 25; ++b) {
        std::vector<Row> rows;
        for (int i = 0; i < 8; ++i) rows.push_back(Row{{"thread", t}, {"i", b * 8 + i}});
        writer.write_raw_data(rows);
      }
    });
  for (auto& th : threads) th.join();
  writer.commit();
  RecordReader reader(dir / "mt0");
  ASSERT_EQ(reader.num_rows(), 800u);
  std::vector<int> next(4, 0);
  for (uint64_t r = 0; r < 800; r += 8) {
    int t = int(reader.read(r)[0].as_int());
    for (uint64_t k = 0; k < 8; ++k) {  // a batch is 8 consecutive rows of one thread, in order
      auto v = reader.read(r + k);
      EXPECT_EQ(v[0].as_int(), t);
      EXPECT_EQ(v[1].as_int(), next[size_t(t)]++);
    }
  }
}

TEST(RecordRoundTrip, BadRowsRejectTheWholeBatch) {
  ScratchDir dir;
  FileWriter writer(dir / "bad");
  writer.add_schema(
      {Field::scalar("a", FieldType::int32), Field::array("v", ElemType::uint8, {2})});
  auto good = Row{{"a", 1}, {"v", Value::array<uint8_t>({2}, {1, 2})}};
  auto message = [&](std::vector<Row> rows) {
    try {
      writer.write_raw_data(rows);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({good, Row{{"a", 1}}}).find("field 'v'"), std::string::npos);
  EXPECT_NE(message({Row{{"a", int64_t(1) << 40}, {"v", Value::array<uint8_t>({2}, {1, 2})}}})
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(message({Row{{"a", 1}, {"v", Value::array<uint8_t>({3}, {1, 2, 3})}}}).find("shape"),
            std::string::npos);
  EXPECT_NE(message({Row{{"a", 1}, {"v", Value::array<float>({2}, {1, 2})}}}).find("float32"),
            std::string::npos);
  EXPECT_NE(
      message({Row{{"a", 1}, {"v", Value::array<uint8_t>({2}, {1, 2})}, {"zz", 1}}}).find("'zz'"),
      std::string::npos);
  EXPECT_NE(message({Row{{"a", "text"}, {"v", Value::array<uint8_t>({2}, {1, 2})}}})
                .find("expected an integer"),
            std::string::npos);
  EXPECT_EQ(writer.rows_written(), 0u);  // the good row of the first batch was not written
  writer.write_raw_data({good});
  writer.commit();
  EXPECT_EQ(RecordReader(dir / "bad").num_rows(), 1u);
}

TEST(RecordRoundTrip, SchemaErrorsAreClear) {
  ScratchDir dir;
  FileWriter writer(dir / "s");
  EXPECT_THROW(writer.add_schema({}), Error);
  EXPECT_THROW(writer.add_schema(
                   {Field::scalar("a", FieldType::int32), Field::scalar("a", FieldType::int64)}),
               Error);
  EXPECT_THROW(writer.add_schema({Field::array("a", ElemType::none, {2})}), Error);
  EXPECT_THROW(writer.add_schema({Field::array("a", ElemType::uint8, {-2})}), Error);
  writer.add_schema({Field::scalar("a", FieldType::bytes)});
  EXPECT_THROW(writer.add_index({"a"}), Error);  // bytes are not indexable
  EXPECT_THROW(writer.add_index({"b"}), Error);
  EXPECT_THROW(FileWriter(dir / "x", 0), Error);
  EXPECT_THROW(FileWriter(dir / "x", 1, {.page_size = 5000}), Error);
}

}  // namespace
}  // namespace kiln::record::record_roundtrip_test
