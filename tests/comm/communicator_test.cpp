// The communicator without a launcher: a job of one rank, where every collective is a copy or
// nothing. (Several ranks: tests/parallel/mpi/, under mpirun.)
#include <gtest/gtest.h>

#include <vector>

#include "kiln/comm/communicator.h"
#include "kiln/core/error.h"

namespace kiln::comm::communicator_test {
namespace {

TEST(Communicator, AloneIsAJobOfOneRank) {
  if (launched_by_mpirun()) GTEST_SKIP() << "this test is for a process started without mpirun";
  init();
  init();  // idempotent
  EXPECT_TRUE(initialized());
  EXPECT_EQ(rank(), 0);
  EXPECT_EQ(size(), 1);
  EXPECT_EQ(local_size(), 1);
  EXPECT_EQ(kiln::communication::get_group_size(), 1);
}

TEST(Communicator, CollectivesOfOneRank) {
  init();
  std::vector<float> x{1, 2, 3};
  all_reduce(x.data(), 3, DType::f32);
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3}));
  Work w = all_reduce_async(x.data(), 3, DType::f32);
  w.wait();
  std::vector<float> gathered(3);
  all_gather(x.data(), gathered.data(), 3, DType::f32);
  EXPECT_EQ(gathered, x);
  std::vector<float> scattered(3);
  reduce_scatter(x.data(), scattered.data(), 3, DType::f32);
  EXPECT_EQ(scattered, x);
  broadcast(x.data(), 3, DType::f32, 0);
  barrier();
}

TEST(Communicator, BadArgumentsAreErrors) {
  init();
  std::vector<float> x{1, 2, 3};
  EXPECT_THROW(broadcast(x.data(), 3, DType::f32, 1), Error);
  EXPECT_THROW(all_reduce(x.data(), -1, DType::f32), Error);
}

}  // namespace
}  // namespace kiln::comm::communicator_test
