// The shard rules of concat, slice, pad_slice_grad, one_hot, broadcast_to, sum_to_shape and
// cast: the dimension each works along stays whole (and each says so), the others split with
// local attributes for the local shapes, and every accepted form run rank by rank in this
// process computes the whole op (shard_simulation.h).
#include <gtest/gtest.h>

#include <string>

#include "kiln/core/error.h"
#include "kiln/ops/shard_rule.h"
#include "shard_simulation.h"

namespace kiln::ops::shard_rules_shape_test {
namespace {

using shard_simulation::expect_form_computes_the_op;
using shard_simulation::uniform_tensor;
using Map = std::vector<int>;
using Metas = std::vector<TensorMeta>;
constexpr int X = kNotSplit;

std::string error_of(OpKind kind, const std::vector<Tensor>& in, const Attrs& attrs,
                     const Strategy& s) {
  std::vector<TensorMeta> metas;
  for (const Tensor& t : in) metas.push_back(meta_of(t));
  try {
    shard_form(kind, metas, attrs, s, 8);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::optional<Strategy> follow(OpKind kind, const std::vector<Tensor>& in, const Attrs& attrs,
                               int index, const std::vector<int64_t>& parts) {
  std::vector<TensorMeta> metas;
  for (const Tensor& t : in) metas.push_back(meta_of(t));
  return op_def(kind).shard->follow(metas, attrs, index, parts);
}

TEST(ConcatShardRule, SplitsAllButTheAxisAlike) {
  const Tensor a = uniform_tensor({4, 2, 6}, 1), b = uniform_tensor({4, 3, 6}, 2);
  const Attrs axis1 = AxisAttrs{.axis = 1};
  expect_form_computes_the_op(OpKind::concat, {a, b}, axis1, {{2, 1, 3}, {2, 1, 3}});
  std::string e = error_of(OpKind::concat, {a, a}, axis1, {{1, 2, 1}, {1, 2, 1}});
  EXPECT_NE(e.find("concatenation axis 1 cannot be split"), std::string::npos) << e;
  e = error_of(OpKind::concat, {a, b}, axis1, {{2, 1, 1}, {1, 1, 1}});
  EXPECT_NE(e.find("split alike"), std::string::npos) << e;
  EXPECT_EQ(*follow(OpKind::concat, {a, b}, axis1, 1, {2, 3, 1}), Strategy({{2, 1, 1}, {2, 1, 1}}));
  EXPECT_EQ(*follow(OpKind::concat, {a, b}, AxisAttrs{.axis = -1}, -1, {2, 1, 3}),
            Strategy({{2, 1, 1}, {2, 1, 1}}));
}

TEST(SliceShardRule, TheSlicedAxisStaysWhole) {
  const Tensor x = uniform_tensor({4, 9, 6}, 3);
  const Attrs cut = SliceAttrs{.axis = 1, .start = 1, .end = 8, .step = 2};
  expect_form_computes_the_op(OpKind::slice, {x}, cut, {{2, 1, 3}});
  const std::string e = error_of(OpKind::slice, {x}, cut, {{1, 3, 1}});
  EXPECT_NE(e.find("the sliced axis cannot be split"), std::string::npos) << e;
  EXPECT_EQ(*follow(OpKind::slice, {x}, cut, 0, {2, 3, 2}), Strategy({{2, 1, 2}}));
  // pad_slice_grad (the zero padding Conv2d's "same" mode runs): each rank pads its block.
  const Tensor g = uniform_tensor({4, 4, 6}, 4);
  const Attrs pad = SliceAttrs{.axis = 1, .start = 1, .end = 8, .step = 2, .shape = {4, 9, 6}};
  const ShardedForm f = shard_form(OpKind::pad_slice_grad, Metas{meta_of(g)}, pad, {{2, 1, 3}}, 6);
  EXPECT_EQ(f.local_attrs.as<SliceAttrs>().shape, std::vector<int64_t>({2, 9, 2}));
  expect_form_computes_the_op(OpKind::pad_slice_grad, {g}, pad, {{2, 1, 3}});
}

TEST(OneHotShardRule, SplitsTheIndicesNotTheClasses) {
  const Tensor idx = Tensor::from_vector(std::vector<int32_t>{0, 3, 1, 2, 2, 0, 1, 3}, {4, 2});
  const Attrs hot = OneHotAttrs{.num_classes = 4};
  const ShardedForm f = shard_form(OpKind::one_hot, Metas{meta_of(idx)}, hot, {{2, 2}}, 4);
  EXPECT_EQ(f.output_maps[0], Map({0, 1, X}));
  expect_form_computes_the_op(OpKind::one_hot, {idx}, hot, {{2, 2}});
  EXPECT_EQ(*follow(OpKind::one_hot, {idx}, hot, -1, {2, 1, 4}), Strategy({{2, 1}}));
  EXPECT_FALSE(follow(OpKind::one_hot, {idx}, hot, -1, {2, 1}));
}

TEST(BroadcastToShardRule, SplitsWhatIsNotBroadcast) {
  const Tensor x = uniform_tensor({4, 1, 6}, 5);
  const Attrs to = ShapeAttrs{.shape = {3, 4, 5, 6}};
  const ShardedForm f = shard_form(OpKind::broadcast_to, Metas{meta_of(x)}, to, {{2, 1, 3}}, 6);
  EXPECT_EQ(f.output_maps[0], Map({X, 0, X, 1}));
  EXPECT_EQ(f.local_attrs.as<ShapeAttrs>().shape, std::vector<int64_t>({3, 2, 5, 2}));
  expect_form_computes_the_op(OpKind::broadcast_to, {x}, to, {{2, 1, 3}});
  // The result wanted split along a broadcast dimension: x cannot be, so that split is dropped.
  EXPECT_EQ(*follow(OpKind::broadcast_to, {x}, to, -1, {3, 2, 5, 3}), Strategy({{2, 1, 3}}));
}

TEST(SumToShapeShardRule, ASplitSummedDimensionMakesPartialSums) {
  const Tensor x = uniform_tensor({3, 4, 5, 6}, 6);
  const Attrs to = ShapeAttrs{.shape = {4, 1, 6}};
  const ShardedForm f = shard_form(OpKind::sum_to_shape, Metas{meta_of(x)}, to, {{3, 2, 5, 1}}, 30);
  EXPECT_EQ(f.output_maps[0], Map({1, X, X}));
  EXPECT_EQ(f.output_partial[0], Map({0, 2}));
  EXPECT_EQ(f.local_attrs.as<ShapeAttrs>().shape, std::vector<int64_t>({2, 1, 6}));
  EXPECT_NE(f.communication, "");
  expect_form_computes_the_op(OpKind::sum_to_shape, {x}, to, {{3, 2, 5, 1}});
  expect_form_computes_the_op(OpKind::sum_to_shape, {x}, to, {{1, 2, 1, 3}});
  EXPECT_EQ(*follow(OpKind::sum_to_shape, {x}, to, -1, {2, 1, 3}), Strategy({{1, 2, 1, 3}}));
}

TEST(CastShardRule, SplitsAnyWay) {
  const Tensor x = uniform_tensor({4, 6}, 7);
  expect_form_computes_the_op(OpKind::cast, {x}, CastAttrs{.dtype = DType::bf16}, {{2, 3}});
}

}  // namespace
}  // namespace kiln::ops::shard_rules_shape_test
