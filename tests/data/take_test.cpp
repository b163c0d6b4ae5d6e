// take(n) stops its input once it has its rows: the source is asked for about n rows plus what
// the queues between the stages hold, not for the whole epoch; later epochs start afresh.
#include <atomic>
#include <memory>

#include "data_test_util.h"
#include "kiln/data/config.h"
#include "kiln/data/transforms.h"

namespace kiln::data::take_test {
namespace {

constexpr int64_t kEpochRows = 60000;

// Rows {"x": i} of a 60,000-row random-access source that counts the rows it is asked for.
struct CountingSource {
  std::shared_ptr<std::atomic<int64_t>> reads = std::make_shared<std::atomic<int64_t>>(0);

  GeneratorDataset dataset(GeneratorOptions opt = {.shuffle = false}) const {
    auto counter = reads;
    return GeneratorDataset(
        [counter](int64_t i) {
          counter->fetch_add(1);
          return std::vector<Tensor>{Tensor::scalar(double(i), DType::i32)};
        },
        kEpochRows, {"x"}, opt);
  }

  // The same rows as an endless stream (an iterable source), restarted at each epoch.
  GeneratorDataset endless_stream() const {
    auto counter = reads;
    return GeneratorDataset(
        [counter]() -> GeneratorDataset::Next {
          auto next = std::make_shared<int64_t>(0);
          return [counter, next](std::vector<Tensor>& row) {
            counter->fetch_add(1);
            row.push_back(Tensor::scalar(double((*next)++), DType::i32));
            return true;
          };
        },
        {"x"});
  }
};

// What the stages may have read ahead: every queue full and every worker busy, generously.
int64_t read_ahead_bound() {
  return 64 * int64_t(config::get_rows_per_block());
}

transforms::Lambda doubled() {
  return transforms::Lambda("Double", [](const Tensor& t) {
    Tensor o = Tensor::empty(t.shape(), DType::i32);
    o.data<int32_t>()[0] = t.data<int32_t>()[0] * 2;
    return o;
  });
}

// Each epoch's column 0, read to the end of `epochs` epochs; the iterator is gone on return, so
// the pipeline's threads have been joined.
std::vector<std::vector<int64_t>> epochs_of(const Dataset& ds, int64_t epochs) {
  std::vector<std::vector<int64_t>> out;
  testing::run_with_timeout(30, [&] {
    auto it = ds.create_tuple_iterator({.num_epochs = epochs});
    for (int64_t e = 0; e < epochs; ++e) out.push_back(testing::column_values(it));
    std::vector<Tensor> row;
    EXPECT_FALSE(it.next(row));  // the data ends after its epochs
  });
  return out;
}

using Epochs = std::vector<std::vector<int64_t>>;

TEST(Take, StopsReadingOnceItHasItsRows) {
  const int threads_before = testing::thread_count();
  CountingSource src;
  EXPECT_EQ(epochs_of(src.dataset({.num_parallel_workers = 4, .shuffle = false}).take(3), 1),
            (Epochs{{0, 1, 2}}));
  EXPECT_LE(src.reads->load(), 3 + read_ahead_bound());
  EXPECT_GE(src.reads->load(), 3);
  EXPECT_EQ(testing::thread_count(), threads_before);
}

TEST(Take, StopsReadingThroughParallelMapKeepingOrder) {
  CountingSource src;
  auto ds = src.dataset({.num_parallel_workers = 3, .shuffle = false})
                .map({doubled()}, {"x"}, {}, {.num_parallel_workers = 4})
                .take(5);
  EXPECT_EQ(epochs_of(ds, 3), (Epochs{{0, 2, 4, 6, 8}, {0, 2, 4, 6, 8}, {0, 2, 4, 6, 8}}));
  EXPECT_LE(src.reads->load(), 3 * (5 + read_ahead_bound()));
}

TEST(Take, ThenRepeatGivesTheSameRowsEachEpoch) {
  CountingSource src;
  auto ds = src.dataset().take(3).repeat(2);
  EXPECT_EQ(epochs_of(ds, 2), (Epochs{{0, 1, 2, 0, 1, 2}, {0, 1, 2, 0, 1, 2}}));
  // Four passes of take(3), each cut short.
  EXPECT_LE(src.reads->load(), 4 * (3 + read_ahead_bound()));
}

TEST(Take, OfBatchesAndOfAShard) {
  CountingSource src;
  auto shard = src.dataset({.shuffle = false, .num_shards = 2, .shard_id = 1});
  EXPECT_EQ(epochs_of(shard.take(3), 2), (Epochs{{1, 3, 5}, {1, 3, 5}}));
  EXPECT_EQ(epochs_of(shard.batch(2).take(2), 1), (Epochs{{1, 3, 5, 7}}));
  EXPECT_LE(src.reads->load(), 3 * (4 + read_ahead_bound()));
}

TEST(Take, EndsEachEpochOfAnEndlessInput) {
  // Before take stopped its input, both of these read forever.
  CountingSource src;
  EXPECT_EQ(epochs_of(src.endless_stream().take(4), 2), (Epochs{{0, 1, 2, 3}, {0, 1, 2, 3}}));
  EXPECT_EQ(epochs_of(src.dataset().repeat(-1).take(4), 2), (Epochs{{0, 1, 2, 3}, {0, 1, 2, 3}}));
  EXPECT_LE(src.reads->load(), 4 * (4 + read_ahead_bound()));
}

TEST(Take, StopsAllBranchesOfZipAndConcat) {
  CountingSource a, b;
  auto ys = b.dataset().rename({"x"}, {"y"});
  EXPECT_EQ(epochs_of(zip({a.dataset(), ys}).take(2), 2), (Epochs{{0, 1}, {0, 1}}));
  EXPECT_EQ(epochs_of((a.dataset().take(2) + a.dataset()).take(4), 1), (Epochs{{0, 1, 0, 1}}));
  EXPECT_LE(a.reads->load(), 5 * (4 + read_ahead_bound()));
  EXPECT_LE(b.reads->load(), 2 * (2 + read_ahead_bound()));
}

}  // namespace
}  // namespace kiln::data::take_test
