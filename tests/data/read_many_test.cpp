// SourceReader::read_many: a reader that fetches a block of rows at once gets every row of the
// sampled order, in order, and its errors reach the consumer naming the rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>

#include "kiln/core/error.h"
#include "kiln/data/config.h"
#include "kiln/data/dataset.h"

namespace kiln::data::read_many_test {
namespace {

class BlockSource : public Source {
 public:
  explicit BlockSource(int64_t fail_at = -1) : fail_at_(fail_at) {}
  std::string name() const override { return "BlockSource"; }
  std::vector<std::string> column_names() const override { return {"x"}; }
  int64_t num_rows() const override { return 100; }
  std::unique_ptr<SourceReader> make_reader() const override {
    struct Reader : SourceReader {
      const BlockSource* src;
      void read(int64_t, std::vector<Tensor>&) override {
        throw Error("read() must not be called when reads_many()");
      }
      bool reads_many() const override { return true; }
      void read_many(const std::vector<int64_t>& indices, std::vector<Row>& rows) override {
        src->calls++;
        for (size_t k = 0; k < indices.size(); ++k) {
          if (indices[k] == src->fail_at_)
            throw Error("row " + std::to_string(indices[k]) + " is bad");
          rows[k].columns = {Tensor::scalar(double(indices[k] * 10), DType::i64)};
        }
      }
    };
    auto r = std::make_unique<Reader>();
    r->src = this;
    return r;
  }
  mutable std::atomic<int> calls{0};

 private:
  int64_t fail_at_;
};

std::vector<int64_t> values(const Dataset& d) {
  std::vector<int64_t> out;
  auto it = d.create_tuple_iterator({.num_epochs = 1});
  for (std::vector<Tensor> row; it.next(row);) out.push_back(row[0].item<int64_t>());
  return out;
}

TEST(ReadMany, BlocksKeepTheSampledOrderWithParallelReaders) {
  auto source = std::make_shared<BlockSource>();
  auto in_blocks =
      values(Dataset::from_source(source, {.num_parallel_workers = 3, .shuffle = true}));
  ASSERT_EQ(in_blocks.size(), 100u);
  EXPECT_LT(source->calls.load(), 100) << "rows were read one call each";

  // The same order as a source read row by row.
  auto rows = values(GeneratorDataset(
      [](int64_t i) { return std::vector<Tensor>{Tensor::scalar(double(i * 10), DType::i64)}; },
      100, {"x"}, {.num_parallel_workers = 2, .shuffle = true}));
  EXPECT_EQ(in_blocks, rows);
  auto sorted = in_blocks;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, in_blocks);
  EXPECT_EQ(sorted.front(), 0);
  EXPECT_EQ(sorted.back(), 990);
}

TEST(ReadMany, AnErrorNamesTheBlockAndTheReadersMessage) {
  auto source = std::make_shared<BlockSource>(/*fail_at=*/42);
  try {
    values(Dataset::from_source(source, {.num_parallel_workers = 2, .shuffle = false}));
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("BlockSource: failed to read"), std::string::npos) << m;
    EXPECT_NE(m.find("row 42 is bad"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace kiln::data::read_many_test
