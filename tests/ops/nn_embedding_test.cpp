#include "nn_reference.h"

namespace kiln::testing::nn_embedding_test {
namespace {

const std::vector<int64_t> kIndices{3, 0, 3, 1, 4, 3};  // repeats: the gradient must accumulate

Values embedding_ref(const Values& table, int64_t d, const std::vector<int64_t>& idx) {
  Values y;
  for (int64_t i : idx)
    for (int64_t j = 0; j < d; ++j) y.push_back(table[size_t(i * d + j)]);
  return y;
}

TEST(NnEmbedding, ForwardGathersRows) {
  Tensor table = random_tensor({5, 4}, 1);
  for (DType idt : {DType::i32, DType::i64}) {
    Tensor idx = Tensor::from_vector(kIndices, {2, 3});
    if (idt == DType::i32) idx = ops::cast(idx, DType::i32);
    Tensor y = ops::embedding(table, idx);
    EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
    expect_close(values_of(y), embedding_ref(values_of(table), 4, kIndices), 0, 0, "embedding");
  }
}

TEST(NnEmbedding, GradientAccumulatesRepeatedRows) {
  Tensor idx = Tensor::from_vector(kIndices, {2, 3});
  expect_gradients_match(
      [&](const std::vector<Tensor>& t) { return ops::embedding(t[0], t[1]); },
      [&](const std::vector<Values>& t) { return embedding_ref(t[0], 4, kIndices); },
      {random_tensor({5, 4}, 2), idx}, {0});
}

TEST(NnEmbedding, BadInputsNameOpAndShapes) {
  expect_error_mentions(
      [] {
        ops::embedding(Tensor::zeros({5, 4}), Tensor::zeros({3}));
      },
      {"embedding", "i32 or i64", "f32[5, 4]", "f32[3]"});
  expect_error_mentions([] { ops::embedding(Tensor::zeros({5}), Tensor::zeros({3}, DType::i64)); },
                        {"embedding", "[V, D]", "[5]"});
  expect_error_mentions(
      [] {
        ops::embedding(Tensor::zeros({5, 4}), Tensor::from_vector(std::vector<int64_t>{1, 5}, {2}));
      },
      {"embedding", "index 5", "5 rows"});
}

}  // namespace
}  // namespace kiln::testing::nn_embedding_test
