#pragma once
// Helpers shared by the data pipeline tests.
#include <dirent.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data::testing {

// Rows {"x": i32 scalar i} for i in [0, n).
inline GeneratorDataset range_dataset(int64_t n, GeneratorOptions opt = {.shuffle = false}) {
  return GeneratorDataset(
      [](int64_t i) { return std::vector<Tensor>{Tensor::scalar(double(i), DType::i32)}; }, n,
      {"x"}, opt);
}

// All rows of one epoch, column `col` as int64 (scalars) — or each row's first element.
inline std::vector<int64_t> column_values(TupleIterator& it, size_t col = 0) {
  std::vector<int64_t> out;
  std::vector<Tensor> row;
  while (it.next(row)) {
    for (int64_t v : row[col].to_vector<int64_t>()) out.push_back(v);
  }
  return out;
}

inline std::vector<int64_t> run_values(const Dataset& ds, size_t col = 0) {
  auto it = ds.create_tuple_iterator({.num_epochs = 1});
  return column_values(it, col);
}

inline int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// Runs `fn`; if it does not return within `seconds`, the test binary fails at once (a hang must
// not stall CI).
inline void run_with_timeout(double seconds, const std::function<void()>& fn) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread t([&] {
    fn();
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done; })) {
      std::fprintf(stderr, "FATAL: test body did not finish within %.1f s (hang)\n", seconds);
      std::fflush(stderr);
      std::_Exit(3);
    }
  }
  t.join();
}

}  // namespace kiln::data::testing
