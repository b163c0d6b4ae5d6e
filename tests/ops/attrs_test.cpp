// Op attribute families (ops/attrs.h): generated hashing, equality and printing, and the checks
// that an op gets the family it declares.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>

#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/op.h"

namespace kiln::ops::attrs_test {
namespace {

// The compile-time check: a member left out of KILN_ATTRS_FIELDS fails the static_assert that
// attrs.h runs over every family. For instance
//
//   struct BrokenAttrs {
//     int64_t axis = 0, forgotten = 0;
//     KILN_ATTRS_FIELDS(axis);  // 'forgotten' is not listed
//     bool operator==(const BrokenAttrs&) const = default;
//   };
//
// counts two members but one listed field, and adding it to KILN_FOR_EACH_ATTRS fails with
// "BrokenAttrs: every member must be listed in KILN_ATTRS_FIELDS". The counting itself:
struct TwoFields {
  int64_t a = 0;
  std::vector<int64_t> b;
};
static_assert(attrs_detail::aggregate_field_count<TwoFields>() == 2);
static_assert(attrs_detail::aggregate_field_count<ConvAttrs>() ==
              attrs_detail::listed_field_count<ConvAttrs>());
static_assert(attrs_detail::aggregate_field_count<NoAttrs>() == 0);

// Every field of a family changed once, one at a time: each copy must differ from the original
// (==) and, for these values, hash differently; an untouched copy equals and hashes the same.
template <class T>
void expect_each_field_counts(const T& base) {
  SCOPED_TRACE(std::string(attrs_kind_name(attrs_kind<T>)));
  const Attrs a = base;
  const Attrs same = T(base);
  EXPECT_EQ(a, same);
  EXPECT_EQ(hash_attrs(a), hash_attrs(same));
  constexpr size_t n = attrs_detail::listed_field_count<T>();
  [&]<size_t... I>(std::index_sequence<I...>) {
    auto change = [&]<size_t K>(std::integral_constant<size_t, K>) {
      T changed = base;
      auto& field = std::get<K>(changed.fields());
      using F = std::remove_cvref_t<decltype(field)>;
      if constexpr (std::is_same_v<F, bool>) {
        field = !field;
      } else if constexpr (std::is_same_v<F, DType>) {
        field = field == DType::f32 ? DType::bf16 : DType::f32;
      } else if constexpr (std::is_arithmetic_v<F>) {
        field = field + F(3);
      } else if constexpr (requires { field.push_back(0); }) {
        field.push_back(7);
      } else {
        field[0] += 5;  // std::array
      }
      const Attrs c = changed;
      EXPECT_NE(a, c) << "field " << K;
      EXPECT_NE(hash_attrs(a), hash_attrs(c)) << "field " << K;
    };
    (void)change;  // NoAttrs has no field to change
    (change(std::integral_constant<size_t, I>{}), ...);
  }
  (std::make_index_sequence<n>());
}

TEST(Attrs, EveryFieldOfEveryFamilyTakesPartInEqualityAndHash) {
  expect_each_field_counts(NoAttrs{});
  expect_each_field_counts(ScalarAttrs{.scalar = 0.5});
  expect_each_field_counts(ReduceAttrs{.axes = {1, 2}, .keepdims = true});
  expect_each_field_counts(ShapeAttrs{.shape = {4, -1}});
  expect_each_field_counts(PermuteAttrs{.perm = {1, 0}});
  expect_each_field_counts(AxisAttrs{.axis = 1});
  expect_each_field_counts(SliceAttrs{.axis = 1, .start = 2, .end = 9, .step = 2});
  expect_each_field_counts(CastAttrs{.dtype = DType::bf16});
  expect_each_field_counts(OneHotAttrs{.num_classes = 10});
  expect_each_field_counts(MatmulAttrs{.transpose_b = true});
  expect_each_field_counts(ConvAttrs{.padding = {1, 1}, .shape = {16, 3, 3, 3}, .nchw16c = 1});
  expect_each_field_counts(PoolAttrs{.kernel = {2, 2}, .stride = {2, 2}});
  expect_each_field_counts(BatchNormAttrs{.training = true, .momentum = 0.9, .eps = 1e-5});
  expect_each_field_counts(LayerNormAttrs{.eps = 1e-5});
  expect_each_field_counts(DropoutAttrs{.p = 0.5, .seed = 42, .training = true});
  expect_each_field_counts(CrossEntropyAttrs{.reduction = 1});
  expect_each_field_counts(EmbeddingGradAttrs{.num_rows = 100});
  expect_each_field_counts(SgdAttrs{.weight_decay = 1e-4});
  expect_each_field_counts(MomentumAttrs{.momentum = 0.9, .weight_decay = 1e-4});
  expect_each_field_counts(AdamAttrs{});
  expect_each_field_counts(MatmulMomentumAttrs{.momentum = 0.9});
  expect_each_field_counts(AllReduceAttrs{.reduction = 1, .group = {0, 2}});
  expect_each_field_counts(CollectiveAttrs{.axis = 1, .group = {1, 3}});
  expect_each_field_counts(BroadcastAttrs{.root = 1});
  expect_each_field_counts(BucketAttrs{.prescale = 0.25});
  expect_each_field_counts(AllToAllAttrs{.split_axis = 1, .concat_axis = 2, .group = {0, 1}});
}

TEST(Attrs, FamiliesDifferEvenWithEqualFields) {
  // Same field values, different family: the variant index takes part in both.
  const Attrs all_reduce = AllReduceAttrs{.reduction = 1}, ce = CrossEntropyAttrs{.reduction = 1};
  EXPECT_NE(all_reduce, ce);
  EXPECT_NE(hash_attrs(all_reduce), hash_attrs(ce));
  EXPECT_NE(hash_attrs(Attrs{}), hash_attrs(ScalarAttrs{}));
  EXPECT_EQ(Attrs{}, Attrs(NoAttrs{}));
}

TEST(Attrs, AsReturnsTheFamilyAndNamesBothOnMisuse) {
  Attrs a = ReduceAttrs{.axes = {1}, .keepdims = true};
  EXPECT_EQ(a.kind(), attrs_kind<ReduceAttrs>);
  EXPECT_TRUE(a.is<ReduceAttrs>());
  EXPECT_EQ(a.as<ReduceAttrs>().axes, std::vector<int64_t>{1});
  a.as<ReduceAttrs>().keepdims = false;
  EXPECT_FALSE(a.as<ReduceAttrs>().keepdims);
  try {
    (void)a.as<ConvAttrs>();
    FAIL() << "as<ConvAttrs> on ReduceAttrs did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ReduceAttrs"), std::string::npos) << what;
    EXPECT_NE(what.find("ConvAttrs"), std::string::npos) << what;
  }
}

TEST(Attrs, CallRejectsAnotherFamilyNamingTheOpAndBoth) {
  Tensor x = Tensor::full(Shape{2, 3}, 1.0f);
  EXPECT_EQ(call_one_output(OpKind::sum, {x}, ReduceAttrs{.axes = {1}, .keepdims = true}).shape(),
            (Shape{2, 1}));
  for (auto run : std::initializer_list<std::function<void()>>{
           [&] { call_one_output(OpKind::sum, {x}, ScalarAttrs{.scalar = 1.0}); },
           [&] {
             std::vector<TensorMeta> in{meta_of(x)};
             infer(OpKind::sum, in, ScalarAttrs{.scalar = 1.0});
           }}) {
    try {
      run();
      FAIL() << "sum with ScalarAttrs did not throw";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("sum"), std::string::npos) << what;
      EXPECT_NE(what.find("ReduceAttrs"), std::string::npos) << what;
      EXPECT_NE(what.find("ScalarAttrs"), std::string::npos) << what;
    }
  }
  // Ops without attributes take NoAttrs, the default.
  EXPECT_NO_THROW(call_one_output(OpKind::relu, {x}));
  EXPECT_THROW(call_one_output(OpKind::relu, {x}, AxisAttrs{}), Error);
}

TEST(Attrs, EveryOpDeclaresAFamily) {
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpDef& def = op_def(OpKind(i));
    EXPECT_LT(size_t(def.attrs), std::variant_size_v<attrs_detail::AttrsVariant>) << def.name;
  }
  EXPECT_EQ(op_def(OpKind::conv2d).attrs, attrs_kind<ConvAttrs>);
  EXPECT_EQ(op_def(OpKind::add).attrs, attrs_kind<NoAttrs>);
  EXPECT_EQ(op_def(OpKind::mul_scalar).attrs, attrs_kind<ScalarAttrs>);
}

TEST(Attrs, PrintsTheFieldsThatDifferFromTheFamilysDefaults) {
  EXPECT_EQ(attrs_str(Attrs{}), "");
  EXPECT_EQ(attrs_str(ReduceAttrs{.axes = {2, 3}, .keepdims = true}), " axes=[2,3] keepdims=1");
  EXPECT_EQ(attrs_str(ConvAttrs{.padding = {1, 1}, .nchw16c = 1u | 1u << kNchw16cOutputBit}),
            " padding=[1,1] nChw16c=in[0] out[0]");
  EXPECT_EQ(attrs_str(CastAttrs{.dtype = DType::bf16}), " dtype=bf16");
}

TEST(Attrs, LayoutBitsLiveOnlyInTheFamiliesWhoseKernelsReadThem) {
  Attrs conv = ConvAttrs{}, bn = BatchNormAttrs{}, sum = ReduceAttrs{};
  ASSERT_NE(conv.layout_bits(), nullptr);
  ASSERT_NE(bn.layout_bits(), nullptr);
  EXPECT_EQ(sum.layout_bits(), nullptr);
  *conv.layout_bits() = 1u << kNchw16cOutputBit;
  EXPECT_TRUE(output_is_nchw16c(conv.as<ConvAttrs>(), 0));
  EXPECT_FALSE(input_is_nchw16c(conv.as<ConvAttrs>(), 0));
}

TEST(Attrs, StaysSmall) {
  // Copied at every eager call and stored per graph node: the largest family and the index.
  EXPECT_LE(sizeof(Attrs), 128u);
}

}  // namespace
}  // namespace kiln::ops::attrs_test
