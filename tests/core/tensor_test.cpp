#include <gtest/gtest.h>

#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln::tensor_test {
namespace {

TEST(Tensor, FactoriesShapesAndValues) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.nbytes(), 24u);
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.f));
  EXPECT_EQ(Tensor::full({3}, 2.5).to_vector<float>(), (std::vector<float>{2.5, 2.5, 2.5}));
  EXPECT_EQ(Tensor::full({2}, 7, DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{7, 7}));
  EXPECT_EQ(Tensor::arange(4, DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(Tensor::scalar(3).rank(), 0);
  EXPECT_EQ(Tensor::scalar(3).item<float>(), 3.f);
  EXPECT_EQ(Tensor::ones({2}, DType::bf16).to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_EQ(describe(z), "f32[2, 3]");
  EXPECT_EQ(Tensor::zeros({0, 4}).numel(), 0);
}

TEST(Tensor, BadInputsAreErrors) {
  EXPECT_THROW(Tensor::from_vector(std::vector<float>{1, 2}, {3}), ShapeError);
  EXPECT_THROW(Tensor::empty({-1}), ShapeError);
  EXPECT_THROW(Tensor::zeros({2}).item<float>(), ShapeError);
  EXPECT_THROW(Tensor::zeros({2}).data<int32_t>(), Error);
  EXPECT_THROW(Tensor::zeros({2}, DType::i32).set_requires_grad(true), Error);
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2});
  EXPECT_THROW(a.copy_from(b), ShapeError);
}

TEST(Tensor, LayoutPredicates) {
  Shape s{2, 3, 4, 5};
  Tensor c = Tensor::empty(s);
  Tensor cl = Tensor::empty_strided(s, channels_last_strides(s), DType::f32);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_TRUE(cl.is_dense());
  EXPECT_TRUE(cl.is_channels_last());
  EXPECT_TRUE(Tensor::empty_like(cl).is_channels_last());
  Tensor t = c.view_as({5, 4, 3, 2}, {1, 5, 20, 60}, 0);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(t.is_dense());
  Tensor gap = c.view_as({2, 3}, {60, 2}, 0);
  EXPECT_FALSE(gap.is_dense());
}

TEST(Tensor, CopyContiguousAndCloneAcrossLayoutsAndDtypes) {
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  Tensor x = Tensor::from_vector(v, {2, 3, 4});
  Tensor t = x.view_as({4, 3, 2}, {1, 4, 12}, 0);  // transpose(0, 2)
  Tensor tc = t.contiguous();
  EXPECT_TRUE(tc.is_contiguous());
  std::vector<float> got = tc.to_vector<float>();
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 3; ++b) {
      for (int c = 0; c < 2; ++c)
        EXPECT_EQ(got[size_t(a * 6 + b * 2 + c)], v[size_t(c * 12 + b * 4 + a)]);
    }
  }
  Tensor bf = Tensor::empty({4, 3, 2}, DType::bf16);
  bf.copy_from(t);
  EXPECT_EQ(bf.to_vector<float>(), got);
  Tensor cl = x.clone();
  EXPECT_NE(cl.raw_data(), x.raw_data());
  EXPECT_EQ(cl.to_vector<float>(), v);
  EXPECT_TRUE(x.contiguous().same(x));
}

// copy_from between two strided views (an offset, a transpose, a destination with gaps) with a
// dtype conversion: every element lands at its logical place, and nothing outside the
// destination view is written.
TEST(Tensor, CopyBetweenStridedViewsOfDifferentDtypes) {
  std::vector<float> v(2 * 3 * 4 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) - 50.f;
  Tensor x = Tensor::from_vector(v, {2, 3, 4, 5});
  // x[:, :, 1:3, :] transposed to [2, 5, 2, 3]: offset 5, strides (60, 1, 5, 20).
  Tensor src = x.view_as({2, 5, 2, 3}, {60, 1, 5, 20}, 5);
  // The first 3 of each row of 4 in base: the fourth must stay untouched.
  Tensor base = Tensor::full({2, 5, 2, 4}, 7.0, DType::bf16);
  Tensor dst = base.view_as({2, 5, 2, 3}, {40, 8, 4, 1}, 0);
  dst.copy_from(src);
  std::vector<float> got = dst.to_vector<float>(), want = src.to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;  // exact in bf16
  const std::vector<float> all = base.to_vector<float>();
  for (size_t i = 3; i < all.size(); i += 4) EXPECT_EQ(all[i], 7.0f) << i;
  // And back, bf16 into a strided f32 view.
  Tensor back = Tensor::zeros({2, 3, 4, 5});
  Tensor back_view = back.view_as({2, 5, 2, 3}, {60, 1, 5, 20}, 5);
  back_view.copy_from(dst);
  EXPECT_EQ(back_view.to_vector<float>(), want);
}

TEST(Tensor, HandlesShareDataAndDetachDropsAutograd) {
  Tensor x = Tensor::zeros({3});
  x.set_requires_grad(true);
  Tensor alias = x;
  EXPECT_TRUE(alias.requires_grad());
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.raw_data(), x.raw_data());
  x.data<float>()[1] = 5;
  EXPECT_EQ(d.to_vector<float>()[1], 5.f);
  Tensor offset_view = x.view_as({2}, {1}, 1);
  EXPECT_EQ(offset_view.to_vector<float>()[0], 5.f);
  x.set_grad(Tensor::ones({3}));
  EXPECT_TRUE(x.grad().defined());
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Tensor, FromBlobBorrowsMemory) {
  std::vector<float> buf{1, 2, 3, 4};
  Tensor t = Tensor::from_blob(buf.data(), {2, 2}, DType::f32);
  buf[3] = 9;
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 9}));
  Tensor tr = Tensor::traced({2}, DType::f32, 0, nullptr);
  EXPECT_TRUE(tr.is_traced());
  EXPECT_THROW(tr.raw_data(), Error);
}

}  // namespace
}  // namespace kiln::tensor_test
