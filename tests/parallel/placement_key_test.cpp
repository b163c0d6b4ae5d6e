// PlacementKey against the layouts it summarises: two keys are equal exactly when the layouts
// place every block on the same ranks, and redistribution_seconds prices what
// plan_redistribution plans, on random layouts of 2 to 16 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kiln/core/error.h"
#include "kiln/parallel/placement_key.h"
#include "kiln/parallel/redistribution.h"

namespace kiln::parallel::placement_key_test {
namespace {

// A random layout of `shape` over `ranks`: the ranks as a random grid, each dimension split
// along a distinct random axis or whole, and (when `partial`) some unused axes partial.
TensorLayout random_layout(const Shape& shape, int64_t ranks, bool partial, std::mt19937_64& gen) {
  TensorLayout l;
  l.shape = shape;
  for (int64_t left = ranks; left > 1;) {
    const int64_t f = (left % 2 == 0 && gen() % 3 != 0) ? 2 : left;
    l.device_matrix.push_back(f == left && left > 4 ? 2 : f);
    left /= l.device_matrix.back();
  }
  if (l.device_matrix.empty()) l.device_matrix = {1};
  std::vector<int> axes(l.device_matrix.size());
  for (size_t a = 0; a < axes.size(); ++a) axes[a] = int(a);
  std::shuffle(axes.begin(), axes.end(), gen);
  size_t next = 0;
  for (int d = 0; d < shape.rank(); ++d) {
    if (next < axes.size() && gen() % 2 == 0) {
      l.tensor_map.push_back(axes[next++]);
    } else {
      l.tensor_map.push_back(ops::kNotSplit);
    }
  }
  if (partial) {
    for (; next < axes.size(); ++next) {
      if (gen() % 2 == 0) l.partial.push_back(axes[next]);
    }
  }
  return l;
}

TEST(PlacementKey, EqualKeysAreTheSamePlacement) {
  std::mt19937_64 gen(3);
  int equal = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t ranks = int64_t(1) << (1 + trial % 4);
    const Shape shape({16, 32, 8});
    const TensorLayout a = random_layout(shape, ranks, trial % 3 == 0, gen);
    const TensorLayout b = random_layout(shape, ranks, trial % 5 == 0, gen);
    const bool same = a.same_placement(b);
    EXPECT_EQ(PlacementKey::of(a) == PlacementKey::of(b), same)
        << a.str() << " vs " << b.str() << " on " << ranks;
    equal += same ? 1 : 0;
    for (size_t d = 0; d < 3; ++d) {
      EXPECT_EQ(PlacementKey::of(a).parts(d), a.parts()[d]);
    }
  }
  EXPECT_GT(equal, 50);  // the trials include equal placements written differently
}

TEST(PlacementKey, RedistributionSecondsAreWhatThePlanTakes) {
  std::mt19937_64 gen(5);
  const CommCostModel model{.alpha_s = 7e-6, .beta_s_per_byte = 0.3e-9};
  int priced = 0, moved = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t ranks = int64_t(1) << (1 + trial % 4);
    const Shape shape({16, 32, 8});
    const TensorLayout from = random_layout(shape, ranks, trial % 2 == 0, gen);
    const TensorLayout to = random_layout(shape, ranks, false, gen);
    Redistribution plan;
    try {
      plan = plan_redistribution(from, to, 0, DType::f32, model);
    } catch (const Error&) {
      continue;  // a sequence these steps cannot do (the search checks its choice exactly)
    }
    const double exact = plan.seconds;
    for (const RedistributionStep& s : plan.steps) {
      moved += s.kind == RedistributionStep::Kind::all_to_all ? 1 : 0;
    }
    const double fast =
        redistribution_seconds(PlacementKey::of(from), PlacementKey::of(to), DType::f32, model);
    EXPECT_NEAR(fast, exact, 1e-12 + 1e-9 * exact) << from.str() << " -> " << to.str();
    ++priced;
  }
  EXPECT_GT(priced, 1500);
  EXPECT_GT(moved, 50);  // the trials include splits an all_to_all moves between dimensions
  // Partial sums are never a target.
  TensorLayout partial = TensorLayout::replicated(Shape({4, 4}), 2);
  partial.partial = {0};
  EXPECT_TRUE(std::isinf(redistribution_seconds(PlacementKey::of(partial),
                                                PlacementKey::of(partial), DType::f32, model)));
}

}  // namespace
}  // namespace kiln::parallel::placement_key_test
