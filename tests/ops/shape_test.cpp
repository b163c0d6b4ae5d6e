#include <cmath>

#include "testing/op_check.h"

namespace kiln::testing::shape_test {
namespace {

Tensor channels_last_copy(const Tensor& t) {
  Tensor cl = Tensor::empty_strided(t.shape(), channels_last_strides(t.shape()), t.dtype());
  cl.copy_from(t);
  return cl;
}

RefFn identity_ref() {
  return [](const std::vector<Values>& x) { return x[0]; };
}

// Reference transpose of row-major values.
Values permute_ref(const Values& x, const Shape& s, const std::vector<int64_t>& perm) {
  std::vector<int64_t> out_dims;
  for (int64_t p : perm) out_dims.push_back(s[int(p)]);
  Shape os(out_dims);
  Strides in_strides = contiguous_strides(s);
  Values y(x.size());
  std::vector<int64_t> idx(perm.size());
  for (int64_t n = 0; n < os.numel(); ++n) {
    int64_t rem = n, off = 0;
    for (int d = os.rank() - 1; d >= 0; --d) {
      idx[size_t(d)] = rem % os[d];
      rem /= os[d];
    }
    for (size_t d = 0; d < perm.size(); ++d) off += idx[d] * in_strides[size_t(perm[d])];
    y[size_t(n)] = x[size_t(off)];
  }
  return y;
}

// Reference slice along `axis` (start/end already normalized).
Values slice_ref(const Values& x, const Shape& s, int axis, int64_t start, int64_t end,
                 int64_t step) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (int d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  Values y;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = start; k < end; k += step) {
      for (int64_t j = 0; j < inner; ++j) y.push_back(x[size_t((o * s[axis] + k) * inner + j)]);
    }
  }
  return y;
}

template <class Fn>
void expect_shape_error(Fn fn, std::vector<std::string> needles) {
  try {
    fn();
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
}

TEST(Reshape, ViewsContiguousCopiesOthersAndInfersMinusOne) {
  Tensor x = random_tensor({2, 3, 4}, 1);
  Tensor v = ops::reshape(x, {6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_EQ(v.raw_data(), x.raw_data()) << "contiguous reshape is a view";
  expect_close(values_of(v), values_of(x), 0, 0, "reshape");
  Tensor t = ops::transpose(x, 0, 2);
  Tensor r = ops::reshape(t, {-1});
  expect_close(values_of(r), values_of(t), 0, 0, "reshape of transposed");
  Tensor cl = channels_last_copy(random_tensor({2, 3, 2, 2}, 2));
  expect_close(values_of(ops::reshape(cl, {2, 12})), values_of(cl), 0, 0, "reshape of NHWC");
  EXPECT_EQ(ops::flatten(x).shape(), (Shape{2, 12}));
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return ops::reshape(in[0], {4, 6});
      },
      identity_ref(), {t});
}

TEST(Reshape, BadShapesNameOpAndShapes) {
  Tensor x = Tensor::zeros({2, 3});
  expect_shape_error([&] { ops::reshape(x, {4, -1}); }, {"reshape", "[2, 3]", "[4, -1]"});
  expect_shape_error([&] { ops::reshape(x, {-1, -1}); }, {"reshape", "[2, 3]"});
  expect_shape_error([&] { ops::reshape(x, {7}); }, {"reshape", "[2, 3]", "[7]"});
  expect_shape_error([&] { ops::flatten(Tensor::scalar(1)); }, {"flatten"});
}

TEST(Transpose, PermutationViewValuesAndGradient) {
  Shape s{2, 3, 4};
  Tensor x = random_tensor(s, 3);
  for (std::vector<int64_t> perm : {std::vector<int64_t>{2, 0, 1}, {1, 0, 2}, {0, 2, 1}}) {
    KilnFn fn = [perm](const std::vector<Tensor>& in) { return ops::transpose(in[0], perm); };
    RefFn ref = [&, perm](const std::vector<Values>& in) { return permute_ref(in[0], s, perm); };
    Tensor y = fn({x});
    EXPECT_EQ(y.raw_data(), x.raw_data()) << "transpose is a view";
    expect_forward_matches(fn, ref, {x}, 0, 0);
    expect_gradients_match(fn, ref, {x});
  }
  Tensor y = ops::transpose(x, -1, 0);
  EXPECT_EQ(y.shape(), (Shape{4, 3, 2}));
  expect_close(values_of(y), permute_ref(values_of(x), s, {2, 1, 0}), 0, 0, "transpose(d0, d1)");
  expect_shape_error([&] { ops::transpose(x, {0, 0, 1}); }, {"transpose", "[2, 3, 4]"});
  expect_shape_error([&] { ops::transpose(x, 0, 3); }, {"transpose", "[2, 3, 4]"});
}

TEST(Transpose, NhwcPermutedToNchwIsChannelsLast) {
  Tensor nhwc = random_tensor({2, 4, 5, 3}, 4);
  Tensor nchw = ops::transpose(nhwc, {0, 3, 1, 2});
  EXPECT_TRUE(nchw.is_channels_last());
  std::vector<ops::TensorMeta> in{ops::meta_of(nhwc)};
  ops::Attrs a = ops::PermuteAttrs{.perm = {0, 3, 1, 2}};
  EXPECT_EQ(ops::infer(ops::OpKind::transpose, in, a)[0].layout, ops::Layout::channels_last);
}

TEST(Contiguous, ChannelsLastAndTransposedToRowMajorWithGradient) {
  for (const Shape& s : {Shape{2, 3, 4, 5}, Shape{8, 64, 24, 24}}) {
    Tensor cl = channels_last_copy(random_tensor(s, 5));
    Tensor c = ops::contiguous(cl);
    EXPECT_TRUE(c.is_contiguous());
    expect_close(values_of(c), values_of(cl), 0, 0, "contiguous of NHWC " + s.str());
  }
  // And back: contiguous → channels-last through a cast's layout-preserving copy path.
  Tensor big = random_tensor({8, 64, 24, 24}, 6);
  Tensor cl = Tensor::empty_strided(big.shape(), channels_last_strides(big.shape()), DType::f32);
  cl.copy_from(big);
  expect_close(values_of(ops::contiguous(ops::transpose(big, 1, 3))),
               permute_ref(values_of(big), big.shape(), {0, 3, 2, 1}), 0, 0, "transpose copy");
  Tensor small = channels_last_copy(random_tensor({2, 3, 2, 2}, 7));
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::contiguous(in[0]); },
                         identity_ref(), {small});
}

TEST(Slice, ViewsWithStepAndNegativeBoundsAndGradient) {
  Shape s{4, 10};
  Tensor x = random_tensor(s, 8);
  struct C {
    int64_t axis, start, end, step;
    int axis_n;
    int64_t ns, ne;
  } cases[] = {{1, 1, 9, 2, 1, 1, 9},   {0, 1, 3, 1, 0, 1, 3},     {-1, -4, 100, 1, 1, 6, 10},
               {1, 0, 10, 3, 1, 0, 10}, {0, -100, -1, 2, 0, 0, 3}, {1, 5, 2, 1, 1, 5, 5}};
  for (const C& c : cases) {
    KilnFn fn = [c](const std::vector<Tensor>& in) {
      return ops::slice(in[0], c.axis, c.start, c.end, c.step);
    };
    RefFn ref = [&, c](const std::vector<Values>& in) {
      return slice_ref(in[0], s, c.axis_n, c.ns, c.ne, c.step);
    };
    expect_forward_matches(fn, ref, {x}, 0, 0);
    if (fn({x}).numel() > 0) expect_gradients_match(fn, ref, {x});
  }
  Tensor v = ops::slice(x, 1, 2, 5);
  EXPECT_EQ(static_cast<float*>(v.raw_data()), x.data<float>() + 2) << "slice is a view";
  expect_shape_error([&] { ops::slice(x, 2, 0, 1); }, {"slice", "[4, 10]"});
  expect_shape_error([&] { ops::slice(x, 0, 0, 1, 0); }, {"slice", "step"});
}

TEST(PadSliceGrad, PlacesGradAndIsDifferentiable) {
  Shape full{3, 7};
  Tensor g = random_tensor({3, 3}, 9);
  KilnFn fn = [&](const std::vector<Tensor>& in) {
    return ops::pad_slice_grad(in[0], full, 1, 1, 7, 2);
  };
  RefFn ref = [&](const std::vector<Values>& in) {
    Values y(21, 0.0);
    for (int r = 0; r < 3; ++r) {
      for (int k = 0; k < 3; ++k) y[size_t(r * 7 + 1 + 2 * k)] = in[0][size_t(r * 3 + k)];
    }
    return y;
  };
  expect_forward_matches(fn, ref, {g}, 0, 0);
  expect_gradients_match(fn, ref, {g});
  expect_shape_error(
      [&] {
        ops::pad_slice_grad(Tensor::zeros({3, 4}), full, 1, 1, 7, 2);
      },
      {"pad_slice_grad", "[3, 4]", "[3, 7]"});
}

TEST(Concat, ForwardOnAnyAxisNonContiguousInputsAndGradient) {
  Tensor a = random_tensor({2, 3}, 10), b = random_tensor({2, 1}, 11);
  Tensor c = ops::transpose(random_tensor({4, 2}, 12), 0, 1);  // [2, 4], non-contiguous
  KilnFn fn = [](const std::vector<Tensor>& in) { return ops::concat(in, 1); };
  RefFn ref = [](const std::vector<Values>& in) {
    Values y;
    for (int r = 0; r < 2; ++r) {
      for (int k = 0; k < 3; ++k) y.push_back(in[0][size_t(r * 3 + k)]);
      y.push_back(in[1][size_t(r)]);
      for (int k = 0; k < 4; ++k) y.push_back(in[2][size_t(r * 4 + k)]);
    }
    return y;
  };
  expect_forward_matches(fn, ref, {a, b, c}, 0, 0);
  expect_gradients_match(fn, ref, {a, b, c});
  Tensor big0 = random_tensor({300, 200}, 13), big1 = random_tensor({100, 200}, 14);
  Tensor y = ops::concat({big0, big1}, 0);
  Values expected = values_of(big0), tail = values_of(big1);
  expected.insert(expected.end(), tail.begin(), tail.end());
  expect_close(values_of(y), expected, 0, 0, "concat axis 0");
  expect_shape_error(
      [&] {
        ops::concat({a, Tensor::zeros({3, 3})}, 1);
      },
      {"concat", "[2, 3]", "[3, 3]"});
  expect_shape_error([&] { ops::concat({}, 0); }, {"concat"});
  expect_shape_error([&] { ops::concat({a}, 2); }, {"concat", "[2, 3]"});
}

TEST(Cast, RoundsToNearestEvenAndKeepsLayout) {
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1).
  // 1 + 3·2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6.
  std::vector<float> v{1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1.0f + 1.5f / 256, -2.5f, 1e-3f};
  Tensor x = Tensor::from_vector(v, {5});
  std::vector<float> b = ops::cast(x, DType::bf16).to_vector<float>();
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], 1.0f + 4.0f / 256);
  EXPECT_EQ(b[2], 1.0f + 2.0f / 256);
  EXPECT_EQ(b[3], -2.5f);
  // f16: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 → 1.
  std::vector<float> h =
      ops::cast(Tensor::from_vector(std::vector<float>{1.0f + 1.0f / 2048, 65519.f, 70000.f}, {3}),
                DType::f16)
          .to_vector<float>();
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], 65504.f);
  EXPECT_TRUE(std::isinf(h[2]));
  EXPECT_EQ(ops::cast(Tensor::from_vector(std::vector<float>{-2.7f, 3.9f}, {2}), DType::i32)
                .to_vector<int32_t>(),
            (std::vector<int32_t>{-2, 3}));
  EXPECT_EQ(ops::cast(Tensor::from_vector(std::vector<int64_t>{5, -7}, {2}), DType::f32)
                .to_vector<float>(),
            (std::vector<float>{5, -7}));
  Tensor cl = channels_last_copy(random_tensor({2, 3, 4, 5}, 15));
  Tensor cb = ops::cast(cl, DType::bf16);
  EXPECT_TRUE(cb.is_channels_last());
  expect_close(values_of(cb), values_of(ops::cast(ops::contiguous(cl), DType::bf16)), 0, 0,
               "cast keeps NHWC");
  Tensor t = ops::transpose(random_tensor({3, 4}, 16), 0, 1);
  expect_close(values_of(ops::cast(t, DType::f16)),
               values_of(ops::cast(ops::contiguous(t), DType::f16)), 0, 0, "cast transposed");
}

TEST(Cast, GradientFlowsBackInTheSourceDtype) {
  KilnFn fn = [](const std::vector<Tensor>& in) {
    return ops::cast(ops::mul_scalar(ops::cast(in[0], DType::bf16), 2.0), DType::f32);
  };
  RefFn ref = [](const std::vector<Values>& in) {
    Values y = in[0];
    for (double& v : y) v *= 2;
    return y;
  };
  Tensor x = random_tensor({3, 4}, 17);
  expect_gradients_match(fn, ref, {x}, {}, 1e-2, 1e-2, 1e-6);
}

TEST(OneHot, ForwardDtypesAndBadIndices) {
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{2, 0, 1, 2}, {2, 2});
  Tensor y = ops::one_hot(idx, 3);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1}));
  Tensor yb = ops::one_hot(Tensor::from_vector(std::vector<int32_t>{1}, {1}), 2, DType::bf16);
  EXPECT_EQ(yb.dtype(), DType::bf16);
  EXPECT_EQ(yb.to_vector<float>(), (std::vector<float>{0, 1}));
  try {
    ops::one_hot(Tensor::from_vector(std::vector<int64_t>{0, 5}, {2}), 3);
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("one_hot"), std::string::npos) << msg;
    EXPECT_NE(msg.find("5"), std::string::npos) << msg;
  }
  expect_shape_error([] { ops::one_hot(Tensor::zeros({2}), 3); }, {"one_hot", "f32[2]"});
  expect_shape_error([&] { ops::one_hot(idx, 0); }, {"one_hot", "i64[2, 2]"});
  EXPECT_NE(ops::op_def(ops::OpKind::one_hot).no_grad_reason, nullptr);
}

}  // namespace
}  // namespace kiln::testing::shape_test
