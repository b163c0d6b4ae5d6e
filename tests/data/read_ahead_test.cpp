// SourceReader::will_read: a reader that reads blocks at once is told each block before it
// reads it, one block ahead, so a reader backed by another process keeps two in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>

#include "kiln/core/error.h"
#include "kiln/data/config.h"
#include "kiln/data/dataset.h"

namespace kiln::data::read_ahead_test {
namespace {

// Records, per reader, the order of announcements (+block) and reads (-block).
class AnnouncedSource : public Source {
 public:
  std::string name() const override { return "AnnouncedSource"; }
  std::vector<std::string> column_names() const override { return {"x"}; }
  int64_t num_rows() const override { return 40; }
  std::unique_ptr<SourceReader> make_reader() const override {
    struct Reader : SourceReader {
      const AnnouncedSource* src;
      std::vector<std::vector<int64_t>> announced;  // not yet read, oldest first
      size_t id;
      void read(int64_t, std::vector<Tensor>&) override { throw Error("not used"); }
      bool reads_many() const override { return true; }
      void will_read(const std::vector<int64_t>& indices) override {
        announced.push_back(indices);
        std::lock_guard<std::mutex> lock(src->mu);
        src->max_ahead = std::max(src->max_ahead, announced.size());
      }
      void read_many(const std::vector<int64_t>& indices, std::vector<Row>& rows) override {
        {
          std::lock_guard<std::mutex> lock(src->mu);
          if (announced.empty() || announced.front() != indices) ++src->unannounced_reads;
          ++src->reads;
        }
        if (!announced.empty()) announced.erase(announced.begin());
        for (size_t k = 0; k < indices.size(); ++k) {
          rows[k].columns = {Tensor::scalar(double(indices[k]), DType::i64)};
        }
      }
    };
    auto r = std::make_unique<Reader>();
    r->src = this;
    return r;
  }
  mutable std::mutex mu;
  mutable size_t max_ahead = 0;
  mutable int unannounced_reads = 0, reads = 0;
};

TEST(ReadAhead, EveryBlockIsAnnouncedBeforeItIsReadAndAtMostOneAhead) {
  auto source = std::make_shared<AnnouncedSource>();
  const int saved_rows_per_block = config::get_rows_per_block();
  config::set_rows_per_block(4);
  Dataset d = Dataset::from_source(source, {.num_parallel_workers = 2, .shuffle = true});
  std::vector<int64_t> seen;
  auto it = d.create_tuple_iterator({.num_epochs = 2});
  for (int epoch = 0; epoch < 2; ++epoch) {  // next() is false at each epoch's end
    for (std::vector<Tensor> row; it.next(row);) seen.push_back(row[0].item<int64_t>());
  }
  config::set_rows_per_block(saved_rows_per_block);
  ASSERT_EQ(seen.size(), 80u);
  EXPECT_GT(source->reads, 2);
  EXPECT_EQ(source->unannounced_reads, 0);
  EXPECT_EQ(source->max_ahead, 2u);  // the block being read and the next one
}

TEST(PerBatchMap, GetsEachBatchsRowsBeforeCollationAndWhereTheBatchIs) {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> seen;  // (epoch, batch)
  // Rows of lengths 1, 2, 3, 1, ...: padded to the batch's longest by the function, not by
  // pad_info, and every other row dropped.
  Dataset d =
      GeneratorDataset(
          [](int64_t i) {
            return std::vector<Tensor>{Tensor::full({i % 3 + 1}, double(i), DType::f32)};
          },
          10, {"x"}, {.shuffle = false})
          .batch(4, false,
                 {.num_parallel_workers = 2,
                  .per_batch_map = [&](std::vector<std::vector<Tensor>>& columns,
                                       const BatchInfo& info) {
                    {
                      std::lock_guard<std::mutex> lock(mu);
                      seen.emplace_back(info.epoch_num, info.batch_num);
                    }
                    std::vector<Tensor> kept;
                    for (size_t r = 0; r < columns[0].size(); r += 2) {
                      kept.push_back(Tensor::full({3}, columns[0][r].to_vector<float>()[0]));
                    }
                    columns[0] = std::move(kept);
                  }});
  auto it = d.create_tuple_iterator({.num_epochs = 2});
  std::vector<Shape> shapes;
  std::vector<float> firsts;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (std::vector<Tensor> row; it.next(row);) {
      shapes.push_back(row[0].shape());
      firsts.push_back(row[0].to_vector<float>()[0]);
    }
  }
  EXPECT_EQ(shapes, (std::vector<Shape>{{2, 3}, {2, 3}, {1, 3}, {2, 3}, {2, 3}, {1, 3}}));
  EXPECT_EQ(firsts, (std::vector<float>{0, 4, 8, 0, 4, 8}));
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, int64_t>>{
                      {0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}}));
}

TEST(PerBatchMap, ColumnsOfUnequalRowCountsAreAnErrorNamingTheBatch) {
  Dataset d = NumpySlicesDataset({Tensor::zeros({6, 2}), Tensor::zeros({6})}, {"x", "y"},
                                 {.shuffle = false})
                  .batch(3, false,
                         {.per_batch_map = [](std::vector<std::vector<Tensor>>& columns,
                                              const BatchInfo& info) {
                           if (info.batch_num == 1) columns[1].pop_back();
                         }});
  auto it = d.create_tuple_iterator({.num_epochs = 1});
  try {
    for (std::vector<Tensor> row; it.next(row);) {
    }
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("per_batch_map on batch 1 of epoch 0 returned 2 rows of column 'y' and 3"),
              std::string::npos)
        << m;
  }
}

}  // namespace
}  // namespace kiln::data::read_ahead_test
