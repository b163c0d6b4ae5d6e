#include "kiln/models/gpt.h"

#include <cmath>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::models {
namespace {

// GPT-2's initialization: N(0, 0.02) weights, zero biases.
constexpr double kInitSigma = 0.02;

std::shared_ptr<nn::Dense> linear(int64_t in, int64_t out) {
  return std::make_shared<nn::Dense>(
      in, out, nn::DenseOptions{.weight_init = nn::Normal(kInitSigma), .bias_init = nn::Zero()});
}

std::shared_ptr<nn::LayerNorm> layer_norm(const GptConfig& c) {
  return std::make_shared<nn::LayerNorm>(std::vector<int64_t>{c.embed_dim},
                                         nn::LayerNormOptions{.eps = c.layer_norm_eps});
}

void check_config(const GptConfig& c) {
  auto fail = [&](const std::string& what) {
    throw Error(detail::concat("Gpt: ", what, " (vocab_size=", c.vocab_size,
                               ", context_length=", c.context_length, ", num_layers=", c.num_layers,
                               ", num_heads=", c.num_heads, ", embed_dim=", c.embed_dim,
                               ", mlp_ratio=", c.mlp_ratio, ", dropout=", c.dropout, ")"));
  };
  if (c.vocab_size < 1 || c.context_length < 1 || c.num_layers < 1 || c.num_heads < 1 ||
      c.embed_dim < 1 || c.mlp_ratio < 1) {
    fail("every size must be >= 1");
  }
  if (c.embed_dim % c.num_heads != 0) fail("embed_dim must be divisible by num_heads");
  if (!(c.dropout >= 0 && c.dropout < 1)) fail("dropout must be in [0, 1)");
  if (!(c.layer_norm_eps > 0)) fail("layer_norm_eps must be > 0");
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(int64_t embed_dim, int64_t num_heads, double dropout)
    : Cell("CausalSelfAttention"), embed_dim_(embed_dim), num_heads_(num_heads) {
  qkv_ = register_cell("qkv", linear(embed_dim, 3 * embed_dim));
  projection_ = register_cell("projection", linear(embed_dim, embed_dim));
  attention_dropout_ = register_cell("attention_dropout", std::make_shared<nn::Dropout>(dropout));
}

Tensor CausalSelfAttention::construct(const Tensor& x) {
  const int64_t b = x.dim(0), t = x.dim(1), c = embed_dim_, h = num_heads_, d = c / h;
  Tensor qkv = qkv_->construct(x);  // [B, T, 3C]
  // [B, T, C] slice -> [B, T, H, D] -> [B, H, T, D]
  auto heads = [&](int64_t part) {
    Tensor p = ops::reshape(ops::slice(qkv, 2, part * c, (part + 1) * c), {b, t, h, d});
    return ops::transpose(p, {0, 2, 1, 3});
  };
  // The 1/sqrt(D) scale on the queries: B·T·C multiplies instead of B·H·T·T on the scores.
  Tensor q = ops::mul_scalar(heads(0), 1.0 / std::sqrt(double(d)));
  Tensor k = heads(1), v = heads(2);
  Tensor scores = ops::matmul(q, k, false, true);  // [B, H, T, T]
  Tensor weights =
      ops::softmax(ops::causal_mask(scores, -std::numeric_limits<double>::infinity()), -1);
  weights = attention_dropout_->construct(weights);
  Tensor y = ops::matmul(weights, v);  // [B, H, T, D]
  y = ops::reshape(ops::transpose(y, {0, 2, 1, 3}), {b, t, c});
  return projection_->construct(y);
}

GptMlp::GptMlp(int64_t embed_dim, int64_t hidden) : Cell("GptMlp") {
  mapping_ = register_cell("mapping", linear(embed_dim, hidden));
  projection_ = register_cell("projection", linear(hidden, embed_dim));
}

Tensor GptMlp::construct(const Tensor& x) {
  return projection_->construct(ops::gelu(mapping_->construct(x)));
}

GptBlock::GptBlock(const GptConfig& config) : Cell("GptBlock") {
  layernorm1_ = register_cell("layernorm1", layer_norm(config));
  attention_ = register_cell("attention", std::make_shared<CausalSelfAttention>(
                                              config.embed_dim, config.num_heads, config.dropout));
  layernorm2_ = register_cell("layernorm2", layer_norm(config));
  mlp_ = register_cell(
      "mlp", std::make_shared<GptMlp>(config.embed_dim, config.mlp_ratio * config.embed_dim));
  residual_dropout_ = register_cell("dropout", std::make_shared<nn::Dropout>(config.dropout));
}

Tensor GptBlock::construct(const Tensor& x) {
  Tensor h =
      ops::add(x, residual_dropout_->construct(attention_->construct(layernorm1_->construct(x))));
  return ops::add(h, residual_dropout_->construct(mlp_->construct(layernorm2_->construct(h))));
}

Gpt::Gpt(const GptConfig& config) : Cell("Gpt"), config_(config) {
  check_config(config_);
  const nn::EmbeddingOptions init{.embedding_table_init = nn::Normal(kInitSigma)};
  word_embedding_ =
      register_cell("word_embedding",
                    std::make_shared<nn::Embedding>(config_.vocab_size, config_.embed_dim, init));
  position_embedding_ = register_cell(
      "position_embedding",
      std::make_shared<nn::Embedding>(config_.context_length, config_.embed_dim, init));
  embedding_dropout_ = register_cell("dropout", std::make_shared<nn::Dropout>(config_.dropout));
  blocks_ = register_cell("blocks", std::make_shared<nn::SequentialCell>());
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    blocks_->append(std::make_shared<GptBlock>(config_));
  }
  layernorm_ = register_cell("layernorm", layer_norm(config_));
}

GptBlock& Gpt::block(int64_t i) {
  if (i < 0 || i >= config_.num_layers) {
    throw Error(
        detail::concat("Gpt::block(", i, "): the model has ", config_.num_layers, " blocks"));
  }
  return static_cast<GptBlock&>(*(*blocks_)[size_t(i)]);
}

Tensor Gpt::construct(const Tensor& tokens) {
  if (tokens.rank() != 2 || (tokens.dtype() != DType::i32 && tokens.dtype() != DType::i64)) {
    throw ShapeError("Gpt: tokens must be i32/i64 [batch, sequence], got " + describe(tokens));
  }
  const int64_t t = tokens.dim(1);
  if (t < 1 || t > config_.context_length) {
    throw ShapeError(detail::concat("Gpt: a sequence of ", t, " tokens (", describe(tokens),
                                    ") does not fit the context length ", config_.context_length));
  }
  // Positions 0..T-1 are the first T rows of the position table: a slice, no index tensor.
  Tensor positions = ops::slice(position_embedding_->embedding_table(), 0, 0, t);  // [T, C]
  Tensor h = ops::add(word_embedding_->construct(tokens), positions);              // [B, T, C]
  h = blocks_->construct(embedding_dropout_->construct(h));
  h = layernorm_->construct(h);
  // The tied output projection: scores against every token's embedding row.
  return ops::matmul(h, word_embedding_->embedding_table(), false, true);  // [B, T, V]
}

}  // namespace kiln::models
