// IteratorOptions::on_wait: the consumer's hook while next() waits (a binding checks Ctrl-C there).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "kiln/data/dataset.h"

namespace kiln::data::iterator_wait_test {
namespace {

// One row, produced only once `release` is set.
GeneratorDataset gated_row(std::atomic<bool>& release) {
  return GeneratorDataset(
      [&release]() -> GeneratorDataset::Next {
        auto done = std::make_shared<bool>(false);
        return [&release, done](std::vector<Tensor>& row) {
          if (*done) return false;
          while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          row = {Tensor::scalar(7, DType::i32)};
          *done = true;
          return true;
        };
      },
      {"x"});
}

struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};

TEST(IteratorWait, AnExceptionFromOnWaitLeavesNextAndTheIteratorStaysUsable) {
  std::atomic<bool> release{false};
  std::atomic<int> calls{0};
  IteratorOptions options;
  options.num_epochs = 1;
  options.on_wait = [&] {
    if (++calls == 2) throw Interrupted();
  };
  auto it = gated_row(release).create_tuple_iterator(options);
  std::vector<Tensor> row;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(it.next(row), Interrupted);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(calls.load(), 2);

  release = true;
  ASSERT_TRUE(it.next(row));
  EXPECT_EQ(row[0].item<int32_t>(), 7);
  EXPECT_FALSE(it.next(row));
}

}  // namespace
}  // namespace kiln::data::iterator_wait_test
