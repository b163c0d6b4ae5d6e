#include "kiln/models/gpt.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "kiln/autograd/tape.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/models/zoo.h"
#include "kiln/ops/functional.h"

namespace kiln::models::gpt_test {
namespace {

// A model small enough that the finite differences below take milliseconds.
GptConfig tiny() {
  return {.vocab_size = 11,
          .context_length = 8,
          .num_layers = 2,
          .num_heads = 2,
          .embed_dim = 8,
          .mlp_ratio = 2};
}

Tensor random_tokens(int64_t b, int64_t t, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> d(0, int32_t(vocab - 1));
  std::vector<int32_t> v(size_t(b * t));
  for (int32_t& x : v) x = d(gen);
  return Tensor::from_vector(v, {b, t});
}

TEST(Gpt, LogitsHaveOneRowPerPositionOverTheVocabulary) {
  set_seed(1);
  Gpt net(tiny());
  EXPECT_EQ(net.construct(random_tokens(3, 8, 11, 1)).shape(), (Shape{3, 8, 11}));
  EXPECT_EQ(net.construct(random_tokens(2, 5, 11, 2)).shape(), (Shape{2, 5, 11}));  // shorter
}

TEST(Gpt, ParametersFollowTheArchitectureWithOneTiedTable) {
  const GptConfig c = tiny();
  Gpt net(c);
  const int64_t C = c.embed_dim, H = c.mlp_ratio * C;
  const int64_t block = 2 * 2 * C                 // layernorm1, layernorm2
                        + C * 3 * C + 3 * C       // attention.qkv
                        + C * C + C               // attention.projection
                        + C * H + H + H * C + C;  // mlp.mapping, mlp.projection
  const int64_t expected = c.vocab_size * C + c.context_length * C + c.num_layers * block + 2 * C;
  int64_t total = 0;
  std::set<std::string> names;
  for (const auto& [name, t] : net.parameters_and_names()) {
    total += t.numel();
    names.insert(name);
  }
  EXPECT_EQ(total, expected) << "the output projection must reuse the token table, not own one";
  for (const char* name :
       {"word_embedding.embedding_table", "position_embedding.embedding_table",
        "blocks.0.layernorm1.gamma", "blocks.0.attention.qkv.weight",
        "blocks.0.attention.projection.bias", "blocks.1.layernorm2.beta",
        "blocks.1.mlp.mapping.weight", "blocks.1.mlp.projection.weight", "layernorm.gamma"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
}

// Changing token t + 1 must leave the logits of positions 0..t unchanged, and change t + 1's.
TEST(Gpt, AttentionIsCausal) {
  set_seed(3);
  Gpt net(tiny());
  net.set_train(false);
  Tensor tokens = random_tokens(2, 8, 11, 4);
  Tensor before = net.construct(tokens);
  for (int64_t t : {0, 3, 6}) {
    std::vector<int32_t> v = tokens.to_vector<int32_t>();
    for (int64_t b = 0; b < 2; ++b) {
      int32_t& x = v[size_t(b * 8 + t + 1)];
      x = (x + 5) % 11;
    }
    Tensor after = net.construct(Tensor::from_vector(v, {2, 8}));
    std::vector<float> a = before.to_vector<float>(), z = after.to_vector<float>();
    double changed = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t p = 0; p < 8; ++p)
        for (int64_t k = 0; k < 11; ++k) {
          const size_t i = size_t((b * 8 + p) * 11 + k);
          if (p <= t) {
            ASSERT_NEAR(a[i], z[i], 1e-6) << "position " << p << " saw token " << t + 1;
          } else if (p == t + 1) {
            changed = std::max(changed, double(std::abs(a[i] - z[i])));
          }
        }
    EXPECT_GT(changed, 1e-4) << "position " << t + 1 << " ignores its own token";
  }
}

// The token table gets gradient from the lookup and from the output projection: the tape's
// gradient must match finite differences of the whole model, for a row the input uses (both
// paths) and a row it does not (the projection alone).
TEST(Gpt, TiedTableGetsGradientFromBothUses) {
  autograd::install_tape();
  set_seed(5);
  Gpt net(tiny());
  net.set_train(false);
  std::vector<int32_t> ids = {1, 2, 3, 1, 2, 3, 4, 5, 5, 4, 3, 2};  // never 7
  Tensor tokens = Tensor::from_vector(ids, {2, 6});
  Tensor weights = Tensor::from_vector(std::vector<float>(size_t(2 * 6 * 11), 0.f), {2, 6, 11});
  {
    std::mt19937 gen(9);
    std::uniform_real_distribution<float> d(0.5f, 1.5f);
    float* w = weights.data<float>();
    for (int64_t i = 0; i < weights.numel(); ++i) w[i] = d(gen);
  }
  auto objective = [&] { return ops::sum(ops::mul(net.construct(tokens), weights)); };
  Tensor table = net.word_embedding_table();
  Tensor grad = autograd::grad(objective(), {table})[0];
  std::vector<float> g = grad.to_vector<float>();
  const int64_t d = tiny().embed_dim;
  ops::NoGradGuard no_grad;
  float* p = table.data<float>();
  for (int64_t row : {1, 7}) {
    double row_norm = 0;
    for (int64_t j = 0; j < d; ++j) {
      const int64_t i = row * d + j;
      const float saved = p[i];
      const float h = 2e-3f;  // the table's values are N(0, 0.02)
      p[i] = saved + h;
      const double up = objective().item<float>();
      p[i] = saved - h;
      const double down = objective().item<float>();
      p[i] = saved;
      const double numeric = (up - down) / (2 * double(h));
      EXPECT_NEAR(g[size_t(i)], numeric, 5e-3 + 1e-2 * std::abs(numeric)) << "row " << row;
      row_norm += numeric * numeric;
    }
    EXPECT_GT(row_norm, 1e-6) << "row " << row << " gets no gradient";
  }
}

TEST(Gpt, BadConfigurationsAndInputsNameTheValues) {
  GptConfig c = tiny();
  c.num_heads = 3;
  try {
    Gpt bad(c);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("divisible"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("num_heads=3"), std::string::npos) << e.what();
  }
  Gpt net(tiny());
  try {
    net.construct(random_tokens(1, 9, 11, 1));
    ADD_FAILURE() << "expected an error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("context length 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(net.construct(Tensor::zeros({2, 4})), ShapeError);  // f32, not token ids
}

TEST(Gpt, ZooBuildsItWithTheVocabularyAsClasses) {
  auto net = create("gpt", {.num_classes = 40, .context_length = 16});
  EXPECT_TRUE(is_language_model("gpt"));
  EXPECT_FALSE(is_language_model("lenet"));
  EXPECT_EQ(net->construct(random_tokens(2, 16, 40, 3)).shape(), (Shape{2, 16, 40}));
}

}  // namespace
}  // namespace kiln::models::gpt_test
