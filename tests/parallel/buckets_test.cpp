// Data parallelism's pieces that need no second rank: bucket assignment, the reducer and the
// context. The job-wide behaviour is tested under mpirun (tests/parallel/mpi/).
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/parallel_context.h"
#include "kiln/parallel/data_parallel.h"

namespace kiln::parallel::buckets_test {
namespace {

std::vector<Tensor> params_of_sizes(const std::vector<int64_t>& sizes) {
  std::vector<Tensor> out;
  for (int64_t n : sizes) out.push_back(Tensor::zeros({n}));
  return out;
}

TEST(Buckets, BackwardOrderWithASmallFirstBucket) {
  // 4-byte floats: 1 MiB = 262144 elements.
  const int64_t mib = 262144;
  std::vector<Tensor> p = params_of_sizes({mib, mib, mib, mib / 2, mib / 2});
  std::vector<Bucket> b = assign_buckets(p, 2.0, 1.0);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{4, 3}));  // 1 MiB: the first cap
  EXPECT_EQ(b[1].params, (std::vector<size_t>{2, 1}));  // 2 MiB
  EXPECT_EQ(b[2].params, (std::vector<size_t>{0}));
  EXPECT_EQ(b[0].numel, mib);
  int64_t total = 0;
  for (const Bucket& x : b) total += x.numel;
  EXPECT_EQ(total, 4 * mib);
}

TEST(Buckets, AParameterLargerThanTheCapGetsItsOwnBucket) {
  std::vector<Tensor> p = params_of_sizes({10, 1000000, 10});
  std::vector<Bucket> b = assign_buckets(p, 1.0, 1.0);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1].params, (std::vector<size_t>{1}));
}

TEST(Reducer, OneRankReturnsTheGradientsWhateverOrderTheyCome) {
  std::vector<Tensor> p = params_of_sizes({3, 2, 4});
  GradientReducer reducer(p);
  std::vector<Tensor> g = {Tensor::from_vector<float>({1, 2, 3}, Shape{3}),
                           Tensor::from_vector<float>({4, 5}, Shape{2}),
                           Tensor::from_vector<float>({6, 7, 8, 9}, Shape{4})};
  for (int step = 0; step < 2; ++step) {
    reducer.ready(1, g[1]);
    reducer.ready(2, g[2]);
    reducer.ready(0, g[0]);
    std::vector<Tensor> out = reducer.finish();
    ASSERT_EQ(out.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(out[i].to_vector<float>(), g[i].to_vector<float>());
  }
}

TEST(Reducer, AMissingOrMisshapenGradientIsAnError) {
  std::vector<Tensor> p = params_of_sizes({3, 2});
  GradientReducer reducer(p);
  EXPECT_THROW(reducer.ready(0, Tensor::zeros({4})), Error);
  reducer.ready(0, Tensor::zeros({3}));
  EXPECT_THROW(reducer.finish(), Error);  // parameter 1 got none
  EXPECT_THROW(GradientReducer({Tensor::zeros({2}, DType::bf16)}), Error);
}

TEST(AutoParallelContext, ValidatesItsFields) {
  EXPECT_THROW(set_auto_parallel_context({.device_num = -1}), Error);
  EXPECT_THROW(set_auto_parallel_context({.device_num = 2, .global_rank = 2}), Error);
  EXPECT_THROW(set_auto_parallel_context({.bucket_cap_mb = 0}), Error);
  EXPECT_THROW(set_auto_parallel_context({.parallel_mode = ParallelMode::AUTO_PARALLEL,
                                          .search_mode = "simulated_annealing"}),
               Error);
  EXPECT_THROW(set_auto_parallel_context({.memory_limit_mb = -1}), Error);
  EXPECT_THROW(set_auto_parallel_context({.memory_limit_mb = std::nan("")}), Error);
  set_auto_parallel_context({.parallel_mode = ParallelMode::DATA_PARALLEL, .gradients_mean = true});
  EXPECT_EQ(get_auto_parallel_context().parallel_mode, ParallelMode::DATA_PARALLEL);
  // A job of one rank is not data parallel: nothing to reduce.
  EXPECT_FALSE(data_parallel_active());
  reset_auto_parallel_context();
  EXPECT_EQ(get_auto_parallel_context().parallel_mode, ParallelMode::STAND_ALONE);
}

TEST(AutoParallelContext, ModeNames) {
  EXPECT_EQ(parse_parallel_mode("data"), ParallelMode::DATA_PARALLEL);
  EXPECT_EQ(parse_parallel_mode("data_parallel"), ParallelMode::DATA_PARALLEL);
  EXPECT_EQ(parallel_mode_name(ParallelMode::STAND_ALONE), "stand_alone");
  try {
    parse_parallel_mode("model");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model'"), std::string::npos);
  }
}

TEST(Agreement, DescriptionsHashStably) {
  EXPECT_EQ(describe_hash("abc"), describe_hash("abc"));
  EXPECT_NE(describe_hash("abc"), describe_hash("abd"));
  EXPECT_GE(describe_hash("x"), 0);
  EXPECT_NE(describe_parameters({{"w", Tensor::zeros({2, 3})}}),
            describe_parameters({{"w", Tensor::zeros({3, 2})}}));
}

}  // namespace
}  // namespace kiln::parallel::buckets_test
