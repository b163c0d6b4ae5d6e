// The two forms of a cell's computation (construct(x) and construct_multi(inputs)): each calls
// the other by default, a cell of several inputs or outputs is called either way, and a cell
// that overrides neither, or is given the wrong number of inputs, is a clear error.
#include "kiln/nn/cell.h"

#include <gtest/gtest.h>

#include "kiln/core/error.h"
#include "kiln/nn/nn.h"
#include "kiln/ops/functional.h"

namespace kiln::nn::cell_test {
namespace {

Tensor vec(std::vector<float> v) {
  return Tensor::from_vector(v, {int64_t(v.size())});
}

void expect_values(const Tensor& t, const std::vector<float>& expected) {
  EXPECT_EQ(t.to_vector<float>(), expected) << describe(t);
}

// a * b, and a + b: two inputs, two outputs.
class ProductAndSum : public Cell {
 public:
  ProductAndSum() : Cell("ProductAndSum") {}
  Tensors construct_multi(const Tensors& inputs) override {
    return {ops::mul(inputs.at(0), inputs.at(1)), ops::add(inputs.at(0), inputs.at(1))};
  }
};

// 2x, in the multi form only: one input, one output.
class DoubleMulti : public Cell {
 public:
  DoubleMulti() : Cell("DoubleMulti") {}
  Tensors construct_multi(const Tensors& inputs) override {
    return {ops::mul_scalar(inputs.at(0), 2.0)};
  }
};

// x and 2x: one input, two outputs.
class ValueAndDouble : public Cell {
 public:
  ValueAndDouble() : Cell("ValueAndDouble") {}
  Tensors construct_multi(const Tensors& inputs) override {
    return {inputs.at(0), ops::mul_scalar(inputs.at(0), 2.0)};
  }
};

class Neither : public Cell {
 public:
  Neither() : Cell("Neither") {}
};

TEST(CellForms, SeveralInputsAndOutputs) {
  ProductAndSum cell;
  const Tensors out = cell(vec({1, 2}), vec({3, 4}));
  ASSERT_EQ(out.size(), 2u);
  expect_values(out[0], {3, 8});
  expect_values(out[1], {4, 6});
  expect_values(cell.first_output({vec({1, 2}), vec({3, 4})}), {3, 8});
  EXPECT_EQ(cell(Tensors{vec({1}), vec({2})}).size(), 2u);
}

TEST(CellForms, EachDefaultCallsTheOtherForm) {
  ReLU relu;  // overrides construct(x)
  const Tensors out = relu.construct_multi({vec({-1, 2})});
  ASSERT_EQ(out.size(), 1u);
  expect_values(out[0], {0, 2});
  expect_values(relu.first_output({vec({-3, 3})}), {0, 3});
  DoubleMulti twice;  // overrides construct_multi(inputs)
  expect_values(twice(vec({1, -2})), {2, -4});
  expect_values(twice.construct(vec({3})), {6});
}

TEST(CellForms, WrongCountsAndMissingFormsAreNamed) {
  ReLU relu;
  try {
    relu(vec({1}), vec({2}));
    FAIL() << "two inputs to a one-input cell";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ReLU takes one input"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got 2"), std::string::npos) << e.what();
  }
  ValueAndDouble two_outputs;
  expect_values(two_outputs.first_output({vec({3})}), {3});
  try {
    two_outputs(vec({1}));
    FAIL() << "one output asked of a two-output cell";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ValueAndDouble returns 2 outputs"), std::string::npos)
        << e.what();
  }
  Neither neither;
  for (int form = 0; form < 2; ++form) {
    try {
      if (form == 0) neither(vec({1}));
      if (form == 1) neither(Tensors{vec({1})});
      FAIL() << "a cell with no construct ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Neither: the cell overrides neither"),
                std::string::npos)
          << e.what();
    }
  }
  // The guard that caught it unwound: the cells work afterwards.
  expect_values(relu(vec({-1})), {0});
}

TEST(CellForms, SequentialCellChildrenKeepTheirForm) {
  SequentialCell seq({std::make_shared<DoubleMulti>(), std::make_shared<ReLU>()});
  expect_values(seq(vec({-1, 3})), {0, 6});
}

}  // namespace
}  // namespace kiln::nn::cell_test
