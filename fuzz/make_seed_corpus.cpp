// Writes small, valid record files of varied shapes into a directory: the fuzzer's seeds.
//   record_seed_corpus OUT_DIR
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kiln/record/file_writer.h"

using namespace kiln::record;

namespace {

void write_set(const std::string& path, int shards, uint32_t page_size, std::vector<Field> schema,
               std::vector<std::string> index, const std::vector<Row>& rows) {
  FileWriter w(path, shards, {.overwrite = true, .page_size = page_size});
  w.add_schema(std::move(schema));
  if (!index.empty()) w.add_index(index);
  if (!rows.empty()) w.write_raw_data(rows);
  w.commit();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  ::mkdir(dir.c_str(), 0755);
  try {
    // Every scalar type, indexed.
    std::vector<Row> rows;
    for (int i = 0; i < 12; ++i)
      rows.push_back(Row{{"i32", i % 3},
                         {"i64", int64_t(i) << 33},
                         {"f32", float(i) / 4},
                         {"f64", -double(i)},
                         {"s", "name" + std::to_string(i % 4)}});
    write_set(dir + "/scalars", 1, 4096,
              {Field::scalar("i32", FieldType::int32), Field::scalar("i64", FieldType::int64),
               Field::scalar("f32", FieldType::float32), Field::scalar("f64", FieldType::float64),
               Field::scalar("s", FieldType::string)},
              {"i32", "i64", "f32", "f64", "s"}, rows);
    // Image-like rows: label + bytes + fixed and free arrays.
    rows.clear();
    for (int i = 0; i < 9; ++i)
      rows.push_back(Row{
          {"label", i % 10},
          {"image", Value::bytes(std::vector<uint8_t>(size_t(20 + i * 7), uint8_t(i)))},
          {"pixels", Value::array(ElemType::uint8, {4, 4}, std::vector<uint8_t>(16, 1))},
          {"boxes", Value::array<float>({i % 3, 4}, std::vector<float>(size_t(i % 3) * 4, 0.5f))}});
    write_set(dir + "/images", 1, 4096,
              {Field::scalar("label", FieldType::int32), Field::scalar("image", FieldType::bytes),
               Field::array("pixels", ElemType::uint8, {4, 4}),
               Field::array("boxes", ElemType::float32, {-1, 4})},
              {"label"}, rows);
    // A record larger than a page, spanning several.
    write_set(dir + "/large", 1, 4096, {Field::scalar("blob", FieldType::bytes)}, {},
              {Row{{"blob", Value::bytes(std::vector<uint8_t>(9000, 7))}},
               Row{{"blob", Value::bytes(std::vector<uint8_t>(10, 8))}}});
    // Two shards, and an empty set.
    write_set(dir + "/pair", 2, 4096,
              {Field::scalar("x", FieldType::int64), Field::array("v", ElemType::float64, {-1})},
              {"x"},
              {Row{{"x", 1}, {"v", Value::array<double>({1}, {1.0})}},
               Row{{"x", 2}, {"v", Value::array<double>({2}, {1.0, 2.0})}},
               Row{{"x", 3}, {"v", Value::array<double>({0}, {})}}});
    write_set(dir + "/empty", 1, 4096, {Field::scalar("x", FieldType::int32)}, {}, {});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "record_seed_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
