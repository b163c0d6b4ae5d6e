// Parallel execution: order, sharding, reproducibility, errors without hangs, bounded memory.
#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "data_test_util.h"
#include "kiln/core/allocator.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/data/config.h"
#include "kiln/data/transforms.h"
#include "kiln/data/vision.h"

namespace kiln::data::engine_test {
namespace {

using testing::range_dataset;
using testing::run_values;

// An image per row whose pixels encode the row, so random transforms have something to change.
GeneratorDataset image_rows(int64_t n, GeneratorOptions opt) {
  return GeneratorDataset(
      [](int64_t i) {
        Tensor t = Tensor::empty(Shape{6, 5, 1}, DType::u8);
        uint8_t* p = t.data<uint8_t>();
        for (int k = 0; k < 30; ++k) p[k] = uint8_t((i * 7 + k * 3) & 0xff);
        return std::vector<Tensor>{t, Tensor::scalar(double(i), DType::i32)};
      },
      n, {"image", "label"}, opt);
}

// A transform whose cost varies by row, so workers finish out of order.
transforms::Lambda jitter() {
  return transforms::Lambda("Jitter", [](const Tensor& t, RowRng& rng) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng.randint(0, 300)));
    return t;
  });
}

std::vector<std::vector<float>> collect(const Dataset& ds) {
  std::vector<std::vector<float>> out;
  auto it = ds.create_tuple_iterator({.num_epochs = 1});
  std::vector<Tensor> row;
  while (it.next(row)) {
    auto v = row[0].to_vector<float>();
    auto l = row[1].to_vector<float>();
    v.insert(v.end(), l.begin(), l.end());
    out.push_back(std::move(v));
  }
  return out;
}

Dataset augmented(int workers, std::optional<bool> shuffle) {
  return image_rows(300, {.num_parallel_workers = workers, .shuffle = shuffle})
      .map({jitter(), vision::RandomCrop({4, 4}, {1}), vision::RandomHorizontalFlip(),
            vision::RandomVerticalFlip(), vision::Rescale(1.0 / 255, 0), vision::HWC2CHW()},
           {"image"}, {}, {.num_parallel_workers = workers})
      .batch(8, false, {.num_parallel_workers = workers});
}

TEST(Engine, MapKeepsOrderAndResultsFor1And4Workers) {
  config::set_seed(7);
  auto one = collect(augmented(1, false));
  auto four = collect(augmented(4, false));
  ASSERT_EQ(one.size(), 38u);
  EXPECT_EQ(one, four);
  // Labels stay in source order.
  auto it = augmented(4, false).create_tuple_iterator({.num_epochs = 1});
  std::vector<Tensor> row;
  int64_t expect = 0;
  while (it.next(row)) {
    for (int32_t l : row[1].to_vector<int32_t>()) EXPECT_EQ(l, expect++);
  }
  EXPECT_EQ(expect, 300);
  config::set_seed(5489);
}

TEST(Engine, SeededRunsReproduceAndSeedsDiffer) {
  config::set_seed(99);
  auto a = collect(augmented(3, true).shuffle(20));
  auto b = collect(augmented(2, true).shuffle(20));
  EXPECT_EQ(a, b);
  config::set_seed(100);
  auto c = collect(augmented(3, true).shuffle(20));
  EXPECT_NE(a, c);
  config::set_seed(5489);
}

TEST(Engine, EpochsDrawNewPermutationsAndNewAugmentations) {
  auto it = range_dataset(50, {.shuffle = true}).create_tuple_iterator({.num_epochs = 2});
  auto e1 = testing::column_values(it), e2 = testing::column_values(it);
  EXPECT_NE(e1, e2);
  std::sort(e1.begin(), e1.end());
  std::sort(e2.begin(), e2.end());
  EXPECT_EQ(e1, e2);
}

TEST(Engine, ShardsCoverEverythingAndAreDisjointWhenNDoesNotDivide) {
  const int64_t n = 10;
  const int shards = 3;
  for (bool shuffle : {false, true}) {
    for (int epoch_count : {1, 2}) {
      std::vector<std::vector<int64_t>> per_shard;
      std::multiset<int64_t> all;
      for (int k = 0; k < shards; ++k) {
        auto ds = range_dataset(n, {.shuffle = shuffle, .num_shards = shards, .shard_id = k});
        EXPECT_EQ(ds.get_dataset_size(), 4);  // ceil(10 / 3)
        auto it = ds.create_tuple_iterator({.num_epochs = epoch_count});
        std::vector<int64_t> v;
        for (int e = 0; e < epoch_count; ++e) v = testing::column_values(it);  // last epoch
        ASSERT_EQ(v.size(), 4u);
        per_shard.push_back(v);
      }
      // Positions k + j * shards < n are the real rows: together exactly 0..n-1.
      std::set<int64_t> seen;
      for (int k = 0; k < shards; ++k) {
        for (int j = 0; k + j * shards < n; ++j) {
          EXPECT_TRUE(seen.insert(per_shard[size_t(k)][size_t(j)]).second)
              << "row " << per_shard[size_t(k)][size_t(j)] << " in two shards (shuffle=" << shuffle
              << ")";
        }
      }
      EXPECT_EQ(seen.size(), size_t(n));
      if (!shuffle) {
        EXPECT_EQ(per_shard[0], (std::vector<int64_t>{0, 3, 6, 9}));
        EXPECT_EQ(per_shard[1], (std::vector<int64_t>{1, 4, 7, 0}));  // wraps around
        EXPECT_EQ(per_shard[2], (std::vector<int64_t>{2, 5, 8, 1}));
      }
    }
  }
}

TEST(Engine, NumSamplesCapsAfterSharding) {
  auto ds =
      range_dataset(100, {.shuffle = false, .num_samples = 5, .num_shards = 4, .shard_id = 1});
  EXPECT_EQ(ds.get_dataset_size(), 5);
  EXPECT_EQ(run_values(ds), (std::vector<int64_t>{1, 5, 9, 13, 17}));
}

TEST(Engine, TransformErrorNamesStageTransformRowAndStopsEveryThread) {
  const int threads_before = testing::thread_count();
  testing::run_with_timeout(20, [&] {
    auto boom = transforms::Lambda("Boom", [](const Tensor& t) {
      if (t.item<int32_t>() == 137) throw Error("value 137 is cursed");
      return t;
    });
    auto ds = range_dataset(100000).map({boom}, {"x"}, {}, {.num_parallel_workers = 4}).batch(16);
    auto it = ds.create_tuple_iterator();
    std::vector<Tensor> row;
    auto t0 = std::chrono::steady_clock::now();
    try {
      while (it.next(row)) {
      }
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_LT(s, 1.0);
      std::string m = e.what();
      EXPECT_NE(m.find("map[Boom]"), std::string::npos) << m;
      EXPECT_NE(m.find("transform Boom"), std::string::npos) << m;
      EXPECT_NE(m.find("row 137"), std::string::npos) << m;
      EXPECT_NE(m.find("value 137 is cursed"), std::string::npos) << m;
    }
    // All pipeline threads have been joined by the time the error reaches us.
    EXPECT_EQ(testing::thread_count(), threads_before + 1);  // + the watchdog's body thread
    EXPECT_THROW(it.next(row), Error);                       // and it stays failed
  });
  EXPECT_EQ(testing::thread_count(), threads_before);
}

TEST(Engine, CorruptImageErrorNamesDecode) {
  testing::run_with_timeout(20, [&] {
    auto ds = GeneratorDataset(
                  [](int64_t i) {
                    std::vector<uint8_t> bytes = {0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3};
                    return std::vector<Tensor>{Tensor::from_vector(bytes, Shape{7})};
                  },
                  4, {"image"}, {.shuffle = false})
                  .map({vision::Decode(), vision::RandomCrop({2, 2})}, {"image"}, {},
                       {.num_parallel_workers = 2});
    try {
      run_values(ds);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("map[Decode,RandomCrop]"), std::string::npos) << m;
      EXPECT_NE(m.find("transform Decode"), std::string::npos) << m;
      EXPECT_NE(m.find("row 0 of GeneratorDataset"), std::string::npos) << m;
      EXPECT_NE(m.find("JPEG"), std::string::npos) << m;
    }
  });
}

TEST(Engine, ThrowingGeneratorIsReportedTheSameWay) {
  const int before = testing::thread_count();
  testing::run_with_timeout(20, [&] {
    int64_t produced = 0;
    auto ds = GeneratorDataset(
        [&produced] {
          produced = 0;
          return GeneratorDataset::Next([&produced](std::vector<Tensor>& row) {
            if (produced == 41) throw std::runtime_error("sensor unplugged");
            row = {Tensor::scalar(double(produced++), DType::i32)};
            return true;
          });
        },
        {"x"});
    auto it = ds.map({transforms::TypeCast(DType::f32)}, {"x"}, {}, {.num_parallel_workers = 2})
                  .create_tuple_iterator();
    std::vector<Tensor> row;
    try {
      while (it.next(row)) {
      }
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("GeneratorDataset"), std::string::npos) << m;
      EXPECT_NE(m.find("row 41"), std::string::npos) << m;
      EXPECT_NE(m.find("sensor unplugged"), std::string::npos) << m;
    }
    // Random-access generators too.
    auto ra = GeneratorDataset(
        [](int64_t i) -> std::vector<Tensor> {
          if (i == 5) throw Error("bad index");
          return {Tensor::scalar(double(i), DType::i32)};
        },
        20, {"x"}, {.num_parallel_workers = 3, .shuffle = false});
    EXPECT_THROW(run_values(ra), Error);
  });
  EXPECT_EQ(testing::thread_count(), before);
}

TEST(Engine, DestroyingAnIteratorMidEpochJoinsItsThreads) {
  const int before = testing::thread_count();
  testing::run_with_timeout(20, [&] {
    for (int rep = 0; rep < 5; ++rep) {
      auto it = range_dataset(1000000)
                    .map({jitter()}, {"x"}, {}, {.num_parallel_workers = 3})
                    .shuffle(64)
                    .batch(10, false, {.num_parallel_workers = 2})
                    .create_tuple_iterator();
      std::vector<Tensor> row;
      for (int i = 0; i < 3; ++i) ASSERT_TRUE(it.next(row));
    }
  });
  EXPECT_EQ(testing::thread_count(), before);
}

TEST(Engine, MemoryStaysBoundedOnAnEndlessGenerator) {
  constexpr int64_t kRowBytes = 64 << 10;
  auto endless = GeneratorDataset(
      [] {
        auto i = std::make_shared<int64_t>(0);
        return GeneratorDataset::Next([i](std::vector<Tensor>& row) {
          Tensor t = Tensor::empty(Shape{kRowBytes}, DType::u8);
          std::memset(t.raw_data(), int(*i & 0xff), size_t(kRowBytes));
          row = {t};
          ++*i;
          return true;  // never ends
        });
      },
      {"blob"});
  EXPECT_EQ(endless.get_dataset_size(), -1);
  auto ds =
      endless.map({vision::Rescale(1.0, 0)}, {"blob"}, {}, {.num_parallel_workers = 2}).batch(4);
  const int64_t base = allocator::stats().in_use_bytes;
  allocator::reset_peak();
  testing::run_with_timeout(60, [&] {
    auto it = ds.create_tuple_iterator();
    std::vector<Tensor> row;
    for (int i = 0; i < 1500; ++i) {  // 6000 rows: 1.5 GB of float rows streamed
      ASSERT_TRUE(it.next(row));
      if (i % 100 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // slow consumer
    }
  });
  const double peak_mb = double(allocator::stats().peak_bytes - base) / (1 << 20);
  EXPECT_LT(peak_mb, 200.0) << "pipeline memory grew with the stream";
  std::printf("peak pipeline memory on an endless stream: %.1f MiB\n", peak_mb);
}

TEST(Engine, StatsCountRowsAndNameTheBottleneck) {
  auto slow = transforms::Lambda("Slow", [](const Tensor& t) {
    std::this_thread::sleep_for(std::chrono::microseconds(400));
    return t;
  });
  auto it = range_dataset(400)
                .map({slow}, {"x"}, {}, {.num_parallel_workers = 1})
                .batch(10)
                .create_tuple_iterator({.num_epochs = 1});
  std::vector<Tensor> row;
  while (it.next(row)) {
  }
  PipelineStats s = it.stats();
  ASSERT_GE(s.stages.size(), 3u);
  EXPECT_EQ(s.stages[0].kind, "source");
  EXPECT_EQ(s.stages[0].rows, 400);
  auto map =
      std::find_if(s.stages.begin(), s.stages.end(), [](auto& st) { return st.kind == "map"; });
  ASSERT_NE(map, s.stages.end());
  EXPECT_EQ(map->rows, 400);
  EXPECT_GT(map->busy_s, 0.12);
  EXPECT_EQ(s.stages.back().rows, 40);
  EXPECT_EQ(s.rows_consumed, 40);
  EXPECT_EQ(s.bottleneck, "map[Slow]");
  EXPECT_NE(s.advice.find("raise num_parallel_workers"), std::string::npos) << s.advice;
  EXPECT_NE(s.summary().find("bottleneck"), std::string::npos);
  EXPECT_NE(s.to_json().find("\"stages\":["), std::string::npos);
}

TEST(Engine, DiagnoseBlamesTheConsumerWhenThePipelineKeepsUp) {
  PipelineStats s;
  s.wall_s = 10;
  s.consumer_wait_s = 0.2;
  s.stages.push_back({.name = "src", .kind = "source", .workers = 1, .busy_s = 1});
  diagnose(s, 4);
  EXPECT_EQ(s.bottleneck, "consumer");
  s.consumer_wait_s = 8;
  s.stages.push_back(
      {.name = "map[Decode,RandomCrop]", .kind = "map", .workers = 1, .busy_s = 9.7});
  diagnose(s, 4);
  EXPECT_EQ(s.bottleneck, "map[Decode,RandomCrop]");
  EXPECT_NE(
      s.advice.find("map[Decode,RandomCrop] is busy 97% with 1 worker: raise num_parallel_workers"),
      std::string::npos)
      << s.advice;
}

TEST(Engine, DefaultWorkersComeFromTheMachine) {
  EXPECT_GE(config::get_num_parallel_workers(), 1);
  config::set_num_parallel_workers(3);
  EXPECT_EQ(config::get_num_parallel_workers(), 3);
  auto it = range_dataset(10).map({transforms::TypeCast(DType::f32)}).create_tuple_iterator();
  auto st = it.stats().stages;
  EXPECT_EQ(st[1].workers, 3);
  EXPECT_THROW(config::set_prefetch_size(0), Error);
  config::set_prefetch_size(16);
  config::set_num_parallel_workers(0);
  EXPECT_EQ(config::get_num_parallel_workers(), available_cores());
}

}  // namespace
}  // namespace kiln::data::engine_test
