// Collective ops across the job's ranks: forward against references built from every rank's
// (known) input, gradients against finite differences of a job-wide objective.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kiln/autograd/tape.h"
#include "kiln/comm/communicator.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/tracer.h"
#include "kiln/ops/comm/collectives.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/kernels/copy.h"

namespace kiln {
namespace {

int ranks() {
  return comm::size();
}
int me() {
  return comm::rank();
}

// Rank r's input: element i is r * 10 + i * 0.5 - 1.
Tensor rank_input(int r, const Shape& shape) {
  Tensor x = Tensor::empty(shape);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(r * 10 + i * 0.5 - 1);
  return x;
}

std::vector<float> values(const Tensor& t) {
  return t.to_vector<float>();
}

TEST(Collectives, JobHasSeveralRanks) {
  ASSERT_GE(ranks(), 2) << "run these tests under mpirun -np 2 or more";
}

TEST(Collectives, AllReduceSumAndMean) {
  const Shape shape({2, 3});
  Tensor x = rank_input(me(), shape);
  std::vector<float> sum(6, 0.f);
  for (int r = 0; r < ranks(); ++r) {
    std::vector<float> v = values(rank_input(r, shape));
    for (size_t i = 0; i < 6; ++i) sum[i] += v[i];
  }
  std::vector<float> y = values(ops::all_reduce(x, ops::CollectiveReduction::sum));
  std::vector<float> m = values(ops::all_reduce(x, ops::CollectiveReduction::mean));
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_FLOAT_EQ(y[i], sum[i]) << i;
    EXPECT_FLOAT_EQ(m[i], sum[i] / float(ranks())) << i;
  }
  // The input is left alone.
  EXPECT_EQ(values(x), values(rank_input(me(), shape)));
}

TEST(Collectives, AllReduceOfChannelsLastTensor) {
  Tensor x = rank_input(me(), Shape({1, 3, 2, 2}));
  Tensor cl = Tensor::empty_strided(x.shape(), channels_last_strides(x.shape()), DType::f32);
  ops::strided_copy(x, cl);
  std::vector<float> got = values(ops::contiguous(ops::all_reduce(cl)));
  std::vector<float> want = values(ops::all_reduce(x));
  EXPECT_EQ(got, want);
}

TEST(Collectives, BroadcastFromEachRoot) {
  for (int root = 0; root < ranks(); ++root) {
    Tensor x = rank_input(me(), Shape({5}));
    EXPECT_EQ(values(ops::broadcast(x, root)), values(rank_input(root, Shape({5})))) << root;
  }
  EXPECT_THROW(ops::broadcast(rank_input(me(), Shape({5})), ranks()), ShapeError);
}

TEST(Collectives, AllGatherAndReduceScatter) {
  Tensor x = rank_input(me(), Shape({2, 3}));
  Tensor gathered = ops::all_gather(x);
  ASSERT_EQ(gathered.shape(), Shape({2 * int64_t(ranks()), 3}));
  std::vector<float> want;
  for (int r = 0; r < ranks(); ++r) {
    std::vector<float> v = values(rank_input(r, Shape({2, 3})));
    want.insert(want.end(), v.begin(), v.end());
  }
  EXPECT_EQ(values(gathered), want);

  Tensor big = rank_input(me(), Shape({2 * int64_t(ranks()), 3}));
  Tensor scattered = ops::reduce_scatter(big);
  ASSERT_EQ(scattered.shape(), Shape({2, 3}));
  std::vector<float> sum(size_t(big.numel()), 0.f);
  for (int r = 0; r < ranks(); ++r) {
    std::vector<float> v = values(rank_input(r, big.shape()));
    for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  }
  std::vector<float> mine(sum.begin() + me() * 6, sum.begin() + me() * 6 + 6);
  EXPECT_EQ(values(scattered), mine);
  EXPECT_THROW(ops::reduce_scatter(rank_input(me(), Shape({2 * int64_t(ranks()) + 1}))),
               ShapeError);
}

TEST(Collectives, BarrierReturnsTheRankCount) {
  EXPECT_EQ(ops::barrier().to_vector<int32_t>()[0], ranks());
}

TEST(Collectives, BucketStartAndWaitSumPrescaledGradients) {
  Tensor a = rank_input(me(), Shape({2, 2}));
  Tensor b = rank_input(me() + 1, Shape({3}));
  Tensor reduced = ops::all_reduce_bucket_wait(ops::all_reduce_bucket_start({a, b}, 0.5));
  std::vector<float> want(7, 0.f);
  for (int r = 0; r < ranks(); ++r) {
    std::vector<float> va = values(rank_input(r, Shape({2, 2})));
    std::vector<float> vb = values(rank_input(r + 1, Shape({3})));
    for (size_t i = 0; i < 4; ++i) want[i] += 0.5f * va[i];
    for (size_t i = 0; i < 3; ++i) want[4 + i] += 0.5f * vb[i];
  }
  EXPECT_EQ(values(reduced), want);
  EXPECT_THROW(ops::all_reduce_bucket_start({Tensor::zeros({2}, DType::i32)}, 1.0), ShapeError);
}

TEST(Collectives, GraphModeRunsWhatEagerRuns) {
  auto f = [](const Tensor& x) {
    Tensor r = ops::all_reduce(ops::mul_scalar(x, 2.0), ops::CollectiveReduction::mean);
    return ops::add(ops::all_gather(r), ops::all_gather(ops::broadcast(x, 0)));
  };
  Tensor x = rank_input(me(), Shape({2, 3}));
  graph::Graph g;
  {
    graph::Tracer tracer(g);
    tracer.add_output(f(tracer.input(ops::meta_of(x), "x")));
    tracer.finish();
  }
  graph::Executable exe(std::move(g), {.fusion = true});
  for (int step = 0; step < 2; ++step) {
    EXPECT_EQ(values(exe.run(std::vector<Tensor>{x})[0]), values(f(x))) << "step " << step;
  }
}

// The job-wide objective: every rank's sum(w_r * op(x_r)), added over the ranks.
TEST(Collectives, AllGatherAndReduceScatterAlongAnAxis) {
  // Along dimension 1: each rank's [2, 3] block side by side in rank order.
  const int64_t n = ranks();
  Tensor x = rank_input(me(), Shape({2, 3}));
  Tensor gathered = ops::all_gather(x, 1);
  ASSERT_EQ(gathered.shape(), Shape({2, 3 * n}));
  std::vector<float> got = values(gathered);
  for (int r = 0; r < ranks(); ++r) {
    std::vector<float> v = values(rank_input(r, Shape({2, 3})));
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        EXPECT_EQ(got[size_t(i * 3 * n + r * 3 + j)], v[size_t(i * 3 + j)]) << r << " " << i;
      }
    }
  }
  // The sum over ranks of [2, 3n], this rank keeping columns [3 me, 3 me + 3).
  Tensor big = rank_input(me(), Shape({2, 3 * n}));
  Tensor scattered = ops::reduce_scatter(big, 1);
  ASSERT_EQ(scattered.shape(), Shape({2, 3}));
  std::vector<float> sum(size_t(big.numel()), 0.f);
  for (int r = 0; r < ranks(); ++r) {
    std::vector<float> v = values(rank_input(r, big.shape()));
    for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  }
  std::vector<float> mine = values(scattered);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(mine[size_t(i * 3 + j)], sum[size_t(i * 3 * n + me() * 3 + j)]);
    }
  }
  // A group of this rank alone: a copy; a group without this rank: an error naming it.
  EXPECT_EQ(values(ops::all_reduce(x, ops::CollectiveReduction::sum, {me()})), values(x));
  EXPECT_THROW(ops::all_gather(x, 0, {(me() + 1) % ranks()}), Error);
}

using OpFn = std::function<Tensor(const Tensor&)>;
double objective(const OpFn& op, const Tensor& x, const Tensor& w) {
  float local = ops::sum(ops::mul(op(x), w)).to_vector<float>()[0];
  comm::all_reduce(&local, 1, DType::f32);
  return local;
}

// d(objective)/dx on this rank from the tape, against central differences in which each rank
// in turn perturbs each of its elements (every rank computes every objective together).
void check_gradient(const OpFn& op, const Shape& in_shape, const Shape& out_shape) {
  autograd::install_tape();
  Tensor x = rank_input(me(), in_shape);
  Tensor w = rank_input(me() + 3, out_shape);
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = std::sin(w.data<float>()[i]);
  x.set_requires_grad(true);
  Tensor loss = ops::sum(ops::mul(op(x), w));
  std::vector<float> analytic = values(autograd::grad(loss, {x})[0]);
  const double h = 1e-2;
  for (int r = 0; r < ranks(); ++r) {
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto perturbed = [&](double delta) {
        Tensor xp = rank_input(me(), in_shape);
        if (r == me()) xp.data<float>()[i] += float(delta);
        return objective(op, xp, w);
      };
      const double numeric = (perturbed(h) - perturbed(-h)) / (2 * h);
      if (r == me()) {
        EXPECT_NEAR(analytic[size_t(i)], numeric, 2e-2 * (1 + std::abs(numeric)))
            << "rank " << r << " element " << i;
      }
    }
  }
}

TEST(Collectives, GradientOfAllReduce) {
  check_gradient([](const Tensor& x) { return ops::all_reduce(x); }, Shape({3}), Shape({3}));
  check_gradient([](const Tensor& x) { return ops::all_reduce(x, ops::CollectiveReduction::mean); },
                 Shape({3}), Shape({3}));
}

TEST(Collectives, GradientOfBroadcast) {
  check_gradient([](const Tensor& x) { return ops::broadcast(x, 1); }, Shape({3}), Shape({3}));
}

TEST(Collectives, GradientOfAllGatherAndReduceScatter) {
  const int64_t n = ranks();
  check_gradient([](const Tensor& x) { return ops::all_gather(x); }, Shape({2}), Shape({2 * n}));
  check_gradient([](const Tensor& x) { return ops::reduce_scatter(x); }, Shape({2 * n}),
                 Shape({2}));
  check_gradient([](const Tensor& x) { return ops::all_gather(x, 1); }, Shape({2, 2}),
                 Shape({2, 2 * n}));
  check_gradient([](const Tensor& x) { return ops::reduce_scatter(x, 1); }, Shape({2, 2 * n}),
                 Shape({2, 2}));
}

}  // namespace
}  // namespace kiln
