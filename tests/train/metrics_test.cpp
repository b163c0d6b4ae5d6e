// Metrics on a language model's outputs: token accuracy over sequence logits, and perplexity as
// exp of the mean loss per label, batches weighted by their label counts.
#include "kiln/train/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kiln/core/error.h"

namespace kiln::train::metrics_test {
namespace {

TEST(Metrics, AccuracyCountsEveryPositionOfSequenceLogits) {
  // [2, 2, 3]: positions' arg-maxes are 2, 0, 1, 2.
  Tensor logits =
      Tensor::from_vector(std::vector<float>{0, 1, 5, 4, 1, 0, 0, 3, 1, 0, 0, 9}, {2, 2, 3});
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{2, 1, 1, 2}, {2, 2});
  Accuracy a;
  a.update(logits, labels, 0.f);
  EXPECT_DOUBLE_EQ(a.eval(), 3.0 / 4.0);
  EXPECT_THROW(a.update(logits, Tensor::zeros({4}, DType::i32), 0.f), ShapeError);
}

TEST(Metrics, PerplexityWeighsBatchesByTheirLabels) {
  Perplexity p;
  // A batch of 6 labels at mean loss 2, then a short one of 2 labels at mean loss 1.
  p.update(Tensor(), Tensor::zeros({2, 3}, DType::i32), 2.f);
  p.update(Tensor(), Tensor::zeros({1, 2}, DType::i32), 1.f);
  EXPECT_NEAR(p.eval(), std::exp((6 * 2.0 + 2 * 1.0) / 8), 1e-9);
  std::vector<double> sums = p.sums();
  Perplexity q;
  q.set_sums(sums);
  EXPECT_DOUBLE_EQ(q.eval(), p.eval());
  EXPECT_EQ(metric_by_name("perplexity")->sums().size(), 2u);
  Perplexity empty;
  EXPECT_THROW(empty.eval(), Error);
}

}  // namespace
}  // namespace kiln::train::metrics_test
