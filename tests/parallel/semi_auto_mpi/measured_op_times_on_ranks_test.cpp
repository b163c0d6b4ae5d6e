// Measured op times in a job (parallel/measured_op_times.h): rank 0 times, every rank receives
// its figures bit for bit, so that all ranks plan alike; the other ranks time nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kiln/comm/communicator.h"
#include "kiln/parallel/measured_op_times.h"

namespace kiln {
namespace {

TEST(MeasuredOpTimesOnRanks, EveryRankGetsRankZerosFigures) {
  parallel::MeasuredOpTimes times;
  std::vector<autograd::OpTimingQuery> queries;
  for (int64_t n : {1 << 12, 1 << 14, 1 << 16}) {
    queries.push_back({.kind = ops::OpKind::relu, .inputs = {{Shape({n}), DType::f32}}});
  }
  const std::vector<double> mine = times.seconds(queries);
  ASSERT_EQ(mine.size(), queries.size());
  EXPECT_EQ(times.timed(), comm::rank() == 0 ? 3 : 0) << "rank " << comm::rank();

  std::vector<int64_t> rank0(mine.size());
  std::memcpy(rank0.data(), mine.data(), mine.size() * sizeof(double));
  comm::broadcast(rank0.data(), int64_t(rank0.size()), DType::i64, 0);
  for (size_t i = 0; i < mine.size(); ++i) {
    double theirs;
    std::memcpy(&theirs, &rank0[i], sizeof theirs);
    EXPECT_EQ(mine[i], theirs) << "query " << i << " on rank " << comm::rank();
    EXPECT_GT(mine[i], 0);
  }
  // A second call finds every figure cached on every rank, and still agrees.
  EXPECT_EQ(times.seconds(queries), mine);
}

}  // namespace
}  // namespace kiln
