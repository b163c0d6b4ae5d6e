#include <cmath>
#include <limits>

#include "testing/op_check.h"

namespace kiln::testing::reduce_test {
namespace {

enum class Kind { sum, mean, max };

// Double-precision reduction over the axes in `mask`, output in row-major kept-dims order.
Values reduce_ref(const Values& x, const Shape& s, const std::vector<bool>& mask, Kind kind) {
  std::vector<int64_t> out_dims;
  for (int d = 0; d < s.rank(); ++d) {
    if (!mask[size_t(d)]) out_dims.push_back(s[d]);
  }
  Shape os(out_dims);
  Values acc(size_t(os.numel()), kind == Kind::max ? -INFINITY : 0.0);
  std::vector<int64_t> count(acc.size(), 0);
  std::vector<int64_t> idx(size_t(s.rank()));
  for (int64_t n = 0; n < s.numel(); ++n) {
    int64_t rem = n;
    for (int d = s.rank() - 1; d >= 0; --d) {
      idx[size_t(d)] = rem % s[d];
      rem /= s[d];
    }
    int64_t o = 0;
    for (int d = 0; d < s.rank(); ++d) {
      if (!mask[size_t(d)]) o = o * s[d] + idx[size_t(d)];
    }
    double v = x[size_t(n)];
    acc[size_t(o)] = kind == Kind::max ? std::max(acc[size_t(o)], v) : acc[size_t(o)] + v;
    ++count[size_t(o)];
  }
  if (kind == Kind::mean) {
    for (size_t i = 0; i < acc.size(); ++i) acc[i] /= double(count[i]);
  }
  return acc;
}

std::vector<bool> mask_of(const Shape& s, const std::vector<int64_t>& axes) {
  std::vector<bool> m(size_t(s.rank()), axes.empty());
  for (int64_t a : axes) m[size_t(a < 0 ? a + s.rank() : a)] = true;
  return m;
}

Tensor run(Kind k, const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  switch (k) {
    case Kind::sum:
      return ops::sum(x, axes, keepdims);
    case Kind::mean:
      return ops::mean(x, axes, keepdims);
    case Kind::max:
      return ops::max(x, axes, keepdims);
  }
  return {};
}

Tensor channels_last_copy(const Tensor& t) {
  Tensor cl = Tensor::empty_strided(t.shape(), channels_last_strides(t.shape()), t.dtype());
  cl.copy_from(t);
  return cl;
}

struct Case {
  Shape shape;
  std::vector<int64_t> axes;
};

// Small cases, then one per kernel path that is big enough for OpenMP: many rows, few long rows,
// narrow columns (the widening trick), wide columns (chunks), few columns split over threads.
const Case kCases[] = {
    {{3, 4}, {}},        {{3, 4}, {1}},           {{3, 4}, {0}},
    {{2, 3, 4}, {0, 2}}, {{2, 3, 4}, {1}},        {{2, 3, 4}, {-1}},
    {{5}, {0}},          {{2, 1, 3}, {1}},        {{4, 70, 3}, {0, 2}},
    {{400, 200}, {1}},   {{1, 70000}, {1}},       {{2, 40000}, {1}},
    {{70000, 3}, {0}},   {{64, 1100}, {0}},       {{300, 200}, {0}},
    {{40, 5, 300}, {1}}, {{3, 20000, 5}, {0, 1}},
};

class ReduceTest : public ::testing::TestWithParam<Kind> {};

TEST_P(ReduceTest, ForwardMatchesReferenceAllPaths) {
  Kind k = GetParam();
  for (const Case& c : kCases) {
    for (bool keepdims : {false, true}) {
      Tensor x = random_tensor(c.shape, 21);
      Tensor y = run(k, x, c.axes, keepdims);
      std::vector<bool> m = mask_of(c.shape, c.axes);
      Shape expected_shape;
      for (int d = 0; d < c.shape.rank(); ++d) {
        if (!m[size_t(d)])
          expected_shape.dims().push_back(c.shape[d]);
        else if (keepdims)
          expected_shape.dims().push_back(1);
      }
      ASSERT_EQ(y.shape(), expected_shape) << c.shape.str();
      expect_close(values_of(y), reduce_ref(values_of(x), c.shape, m, k), 1e-4, 1e-5,
                   "reduce " + c.shape.str());
    }
  }
}

TEST_P(ReduceTest, NonContiguousInputs) {
  Kind k = GetParam();
  Shape s{2, 3, 4, 5};
  Tensor cl = channels_last_copy(random_tensor(s, 22));
  Tensor big_cl = channels_last_copy(random_tensor({8, 16, 20, 20}, 23));
  Tensor tr = ops::transpose(random_tensor({6, 5, 4}, 24), {2, 0, 1});
  Tensor sl = ops::slice(random_tensor({6, 10}, 25), 1, 1, 10, 3);
  std::vector<std::pair<Tensor, std::vector<int64_t>>> cases = {
      {cl, {0, 2, 3}},     {cl, {1}},        {cl, {2, 3}}, {cl, {}},
      {big_cl, {0, 2, 3}}, {big_cl, {2, 3}}, {tr, {0}},    {tr, {1}},
      {tr, {0, 2}},        {sl, {0}},        {sl, {1}}};
  for (const auto& [x, axes] : cases) {
    Tensor y = run(k, x, axes, false);
    expect_close(values_of(y), reduce_ref(values_of(x), x.shape(), mask_of(x.shape(), axes), k),
                 1e-4, 1e-5, "reduce " + x.str());
  }
}

TEST_P(ReduceTest, GradientMatchesFiniteDifferences) {
  Kind k = GetParam();
  for (const Case& c : {Case{{3, 4}, {}}, Case{{3, 4}, {1}}, Case{{2, 3, 4}, {0, 2}}}) {
    for (bool keepdims : {false, true}) {
      std::vector<bool> m = mask_of(c.shape, c.axes);
      expect_gradients_match(
          [&](const std::vector<Tensor>& x) { return run(k, x[0], c.axes, keepdims); },
          [&](const std::vector<Values>& x) { return reduce_ref(x[0], c.shape, m, k); },
          {random_tensor(c.shape, 26)});
    }
  }
  Tensor cl = channels_last_copy(random_tensor({2, 3, 2, 2}, 27));
  expect_gradients_match(
      [&](const std::vector<Tensor>& x) {
        return run(k, x[0], {0, 2, 3}, false);
      },
      [&](const std::vector<Values>& x) {
        return reduce_ref(x[0], cl.shape(), {true, false, true, true}, k);
      },
      {cl});
}

INSTANTIATE_TEST_SUITE_P(All, ReduceTest, ::testing::Values(Kind::sum, Kind::mean, Kind::max),
                         [](const auto& info) {
                           return std::string(info.param == Kind::sum    ? "sum"
                                              : info.param == Kind::mean ? "mean"
                                                                         : "max");
                         });

TEST(Reduce, LongSumStaysAccurate) {
  // 4M values of 0.1: plain float accumulation would drift by ~1e-3 relative.
  Tensor x = Tensor::full({1 << 22}, 0.1);
  EXPECT_NEAR(ops::sum(x).item<float>(), 0.1 * (1 << 22), 0.1 * (1 << 22) * 1e-6);
  Tensor cols = Tensor::full({1 << 20, 4}, 0.1);
  for (float v : ops::sum(cols, {0}).to_vector<float>()) {
    EXPECT_NEAR(v, 0.1 * (1 << 20), 0.1 * (1 << 20) * 1e-5);
  }
}

TEST(Reduce, MaxTiesShareGradientAndNaNPropagates) {
  autograd::install_tape();
  Tensor x = Tensor::from_vector(std::vector<float>{1, 3, 3, 2}, {4}).detach();
  x.set_requires_grad(true);
  Tensor g = autograd::grad(ops::max(x), {x})[0];
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{0, 0.5, 0.5, 0}));
  std::vector<float> v(100, 1.f);
  v[77] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(ops::max(Tensor::from_vector(v, {100})).item<float>()));
  EXPECT_TRUE(std::isnan(ops::max(Tensor::from_vector(v, {4, 25}), {0}).to_vector<float>()[2]));
}

TEST(Reduce, Bf16AndIntegerInputs) {
  Tensor x = ops::cast(random_tensor({8, 50}, 28), DType::bf16);
  Tensor y = ops::sum(x, {1});
  EXPECT_EQ(y.dtype(), DType::bf16);
  Values ref = reduce_ref(values_of(x), x.shape(), {false, true}, Kind::sum);
  expect_close(values_of(y), ref, 0.05, 1e-2, "bf16 sum");
  Tensor i = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(ops::sum(i, {1}).to_vector<int32_t>(), (std::vector<int32_t>{6, 15}));
  EXPECT_EQ(ops::max(i, {0}).to_vector<int32_t>(), (std::vector<int32_t>{4, 5, 6}));
}

TEST(Reduce, EmptyInputs) {
  Tensor e = Tensor::zeros({0, 3});
  EXPECT_EQ(ops::sum(e, {0}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_TRUE(std::isnan(ops::mean(e).item<float>()));
  EXPECT_THROW(ops::max(e, {0}), ShapeError);
}

TEST(Reduce, BadAxesNameOpAndShape) {
  Tensor x = Tensor::zeros({2, 3});
  for (auto fn : {+[](const Tensor& t) { return ops::sum(t, {2}); },
                  +[](const Tensor& t) { return ops::mean(t, {-3}); },
                  +[](const Tensor& t) {
                    return ops::max(t, {0, 0});
                  },
                  +[](const Tensor& t) { return ops::argmax(t, 5); }}) {
    try {
      fn(x);
      FAIL() << "expected a ShapeError";
    } catch (const ShapeError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("f32[2, 3]"), std::string::npos) << msg;
      EXPECT_TRUE(msg.rfind("sum:", 0) == 0 || msg.rfind("mean:", 0) == 0 ||
                  msg.rfind("max:", 0) == 0 || msg.rfind("argmax:", 0) == 0)
          << msg;
    }
  }
}

// ---- argmax ----

std::vector<int64_t> argmax_ref(const Values& x, const Shape& s, int axis) {
  int64_t outer = 1, inner = 1, r = s[axis];
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (int d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  std::vector<int64_t> out;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      int64_t best = 0;
      for (int64_t k = 1; k < r; ++k) {
        if (x[size_t((o * r + k) * inner + j)] > x[size_t((o * r + best) * inner + j)]) best = k;
      }
      out.push_back(best);
    }
  }
  return out;
}

TEST(Argmax, MatchesReferenceIncludingTiesAndBigInputs) {
  struct C {
    Shape s;
    int axis;
  } cases[] = {{{3, 4}, 1},     {{3, 4}, 0},     {{2, 3, 4}, 1},
               {{500, 100}, 1}, {{100, 500}, 0}, {{7}, 0}};
  for (const C& c : cases) {
    // Few distinct values: many ties, which must resolve to the first index.
    std::vector<float> v(size_t(c.s.numel()));
    std::mt19937 gen(3);
    for (float& f : v) f = float(gen() % 5);
    Tensor x = Tensor::from_vector(v, c.s);
    Tensor y = ops::argmax(x, c.axis);
    EXPECT_EQ(y.dtype(), DType::i64);
    EXPECT_EQ(y.to_vector<int64_t>(), argmax_ref(values_of(x), c.s, c.axis)) << c.s.str();
  }
  Tensor t =
      ops::transpose(Tensor::from_vector(std::vector<float>{1, 9, 5, 2, 3, 8}, {2, 3}), 0, 1);
  EXPECT_EQ(ops::argmax(t, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(ops::argmax(t, 0, true).shape(), (Shape{1, 2}));
  EXPECT_NE(ops::op_def(ops::OpKind::argmax).no_grad_reason, nullptr);
}

// ---- sum_to_shape / broadcast_to ----

TEST(SumTo, ForwardAndGradient) {
  const std::pair<Shape, Shape> cases[] = {{{3, 4}, {4}},          {{3, 4}, {3, 1}},
                                           {{2, 3, 4}, {1, 4}},    {{2, 3, 4}, {}},
                                           {{2, 3, 4}, {2, 3, 4}}, {{500, 300}, {300}}};
  for (const auto& [from, to] : cases) {
    Tensor x = random_tensor(from, 29);
    RefFn ref = [&, from = from, to = to](const std::vector<Values>& v) {
      std::vector<bool> m(size_t(from.rank()));
      int shift = from.rank() - to.rank();
      for (int d = 0; d < from.rank(); ++d) m[size_t(d)] = d < shift || to[d - shift] == 1;
      return reduce_ref(v[0], from, m, Kind::sum);
    };
    KilnFn fn = [to = to](const std::vector<Tensor>& v) { return ops::sum_to_shape(v[0], to); };
    expect_forward_matches(fn, ref, {x}, 1e-4, 1e-5);
    EXPECT_EQ(fn({x}).shape(), to);
    if (from.numel() < 100) expect_gradients_match(fn, ref, {x});
  }
}

TEST(BroadcastTo, ForwardGradientAndErrors) {
  const std::pair<Shape, Shape> cases[] = {
      {{4}, {3, 4}}, {{3, 1}, {3, 4}}, {{}, {2, 3}}, {{1, 4}, {2, 3, 4}}, {{300}, {500, 300}}};
  for (const auto& [from, to] : cases) {
    Tensor x = random_tensor(from, 30);
    RefFn ref = [from = from, to = to](const std::vector<Values>& v) {
      return broadcast_binary(v[0], from, Values(size_t(to.numel()), 0.0), to,
                              [](double a, double) { return a; });
    };
    KilnFn fn = [to = to](const std::vector<Tensor>& v) { return ops::broadcast_to(v[0], to); };
    expect_forward_matches(fn, ref, {x}, 0, 0);
    if (to.numel() < 100) expect_gradients_match(fn, ref, {x});
  }
  Tensor t = ops::transpose(random_tensor({3, 2}, 31), 0, 1);  // [2, 3], non-contiguous
  expect_close(values_of(ops::broadcast_to(t, {4, 2, 3})),
               broadcast_binary(values_of(t), {2, 3}, Values(24, 0.0), {4, 2, 3},
                                [](double a, double) { return a; }),
               0, 0, "broadcast transposed");
  try {
    ops::broadcast_to(Tensor::zeros({3}), {4});
    FAIL();
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("broadcast_to"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  }
  try {
    ops::sum_to_shape(Tensor::zeros({2, 3}), {2});
    FAIL();
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("sum_to_shape"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kiln::testing::reduce_test
