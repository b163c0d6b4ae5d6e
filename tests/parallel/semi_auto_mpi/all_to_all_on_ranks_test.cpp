// all_to_all on the job's ranks: the op itself, forward and backward, against the blocks of the
// whole tensor this process builds alone; and the all_to_all the redistribution planner inserts
// where a split moves from one dimension to another, against the unsharded ops
// (sharded_op_check.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/autograd/tape.h"
#include "kiln/ops/comm/collectives.h"
#include "sharded_op_check.h"

namespace kiln {
namespace {

using ops::OpKind;
using semi_auto_testing::check_sharded;
using semi_auto_testing::expect_close;
using semi_auto_testing::N;
using semi_auto_testing::OpFn;
using semi_auto_testing::random_f32;

// Block `block` of `n` along dimension `dim`.
Tensor block_of(const Tensor& whole, int64_t dim, int64_t n, int64_t block) {
  const int64_t len = whole.dim(int(dim)) / n;
  return ops::contiguous(ops::slice(whole, dim, block * len, (block + 1) * len));
}

// Each rank of `group` holds block `place` of W along `concat_axis`; after the all_to_all it
// holds block `place` of W along `split_axis`. The gradient of sum(y * R) is R's block along
// `concat_axis`: the all_to_all back.
void check_all_to_all(const Shape& whole_shape, int64_t split_axis, int64_t concat_axis,
                      const std::vector<int64_t>& group, uint64_t seed) {
  const int64_t n = int64_t(group.size());
  int64_t place = 0;
  while (group[size_t(place)] != comm::rank()) ++place;
  SCOPED_TRACE("split " + std::to_string(split_axis) + ", concat " + std::to_string(concat_axis) +
               ", " + std::to_string(n) + " ranks");
  autograd::install_tape();
  const Tensor w = random_f32(whole_shape, seed), r = random_f32(whole_shape, seed + 1);
  Tensor x = block_of(w, concat_axis, n, place);
  x.set_requires_grad(true);
  const Tensor y = ops::all_to_all(x, split_axis, concat_axis, group);
  expect_close(y, block_of(w, split_axis, n, place), "output");
  const Tensor loss = ops::sum(ops::mul(y, block_of(r, split_axis, n, place)));
  const std::vector<Tensor> grads = autograd::grad(loss, {x});
  expect_close(grads.at(0), block_of(r, concat_axis, n, place), "gradient");
}

TEST(AllToAllOnRanks, MovesEachRanksBlockAndItsGradientGoesBack) {
  std::vector<int64_t> everyone;
  for (int64_t r = 0; r < N(); ++r) everyone.push_back(r);
  const Shape shape({2 * N(), 3, 2 * N()});
  check_all_to_all(shape, 2, 0, everyone, 1);
  check_all_to_all(shape, 0, 2, everyone, 3);
  check_all_to_all(Shape({N(), 2 * N()}), 1, 0, everyone, 5);
  // Pairs of ranks, each pair with its own tensor.
  const int64_t first = comm::rank() / 2 * 2;
  check_all_to_all(Shape({4, 5, 6}), 0, 2, {first, first + 1}, 7 + uint64_t(first));
  // A group of one: the tensor as it is.
  check_all_to_all(Shape({3, 4}), 1, 0, {comm::rank()}, 13);
}

TEST(AllToAllOnRanks, RefusesADimensionThatDoesNotDivideAmongTheRanks) {
  const Tensor x = random_f32(Shape({2, 2 * N() + 1}), 9);
  try {
    ops::all_to_all(x, 1, 0);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("all_to_all: dimension 1 of f32[2, " + std::to_string(2 * N() + 1) +
                        "] must be a multiple of the " + std::to_string(N()) + " ranks"),
              std::string::npos)
        << what;
  }
}

// A split moved between dimensions: the planner inserts one all_to_all where gathering and
// slicing would send every block to every rank; forward and backward equal the unsharded ops.
TEST(AllToAllOnRanks, InsertedWhereASplitMovesBetweenDimensions) {
  const OpFn relu_gelu = [](const std::vector<Tensor>& in) { return ops::gelu(ops::relu(in[0])); };
  const Tensor x = random_f32(Shape({8, 12}), 11);
  std::string plan = check_sharded(
      {x}, relu_gelu, {{OpKind::relu, {{N(), 1}}}, {OpKind::gelu, {{1, N()}}}}, "rows to columns");
  EXPECT_NE(plan.find("all_to_all from dim 0 to dim 1"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("all_gather"), std::string::npos) << plan;
  const Tensor t = random_f32(Shape({4, 8, 12}), 12);
  plan =
      check_sharded({t}, relu_gelu, {{OpKind::relu, {{1, 1, N()}}}, {OpKind::gelu, {{1, N(), 1}}}},
                    "last dimension to the middle one");
  EXPECT_NE(plan.find("all_to_all from dim 2 to dim 1"), std::string::npos) << plan;
  if (N() == 4) {
    // A [2, 2] grid wanted as rows along the grid's second axis: the rows gathered in pairs,
    // then the columns' split moved to the rows.
    plan = check_sharded({x}, relu_gelu, {{OpKind::relu, {{2, 2}}}, {OpKind::gelu, {{2, 1}}}},
                         "grid to rows");
    EXPECT_NE(plan.find("all_gather dim 0"), std::string::npos) << plan;
    EXPECT_NE(plan.find("all_to_all from dim 1 to dim 0"), std::string::npos) << plan;
  }
}

}  // namespace
}  // namespace kiln
