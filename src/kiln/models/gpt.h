#pragma once
// A GPT-style decoder: token and position embeddings, pre-LayerNorm blocks of causal multi-head
// self-attention and a GELU MLP, a final LayerNorm and the output projection tied to the token
// embedding (logits = h · word_embeddingᵀ). Input: token ids [B, T] (i32/i64, T <= context);
// output: logits [B, T, vocab].
//
// Cell tree (MindSpore's transformer names): word_embedding, position_embedding,
// blocks.<i>.{layernorm1, attention.{qkv, projection}, layernorm2, mlp.{mapping, projection}},
// layernorm.
#include <memory>

#include "kiln/nn/nn.h"

namespace kiln::models {

struct GptConfig {
  int64_t vocab_size = 256;
  int64_t context_length = 64;  // position embedding rows: the longest input sequence
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t embed_dim = 128;  // divisible by num_heads
  int64_t mlp_ratio = 4;    // the MLP's hidden width is mlp_ratio * embed_dim
  double dropout = 0.0;     // on embeddings, attention weights and each residual branch
  double layer_norm_eps = 1e-5;
};

// Multi-head self-attention in which position t attends to positions <= t: one Dense makes
// queries, keys and values, ops::causal_mask hides the later keys, "projection" mixes the heads.
class CausalSelfAttention : public nn::Cell {
 public:
  CausalSelfAttention(int64_t embed_dim, int64_t num_heads, double dropout);
  Tensor construct(const Tensor& x) override;  // [B, T, C] -> [B, T, C]

  // The layers, for SEMI_AUTO_PARALLEL strategies (`attention.qkv().matmul().shard(...)`).
  nn::Dense& qkv() { return *qkv_; }
  nn::Dense& projection() { return *projection_; }

 private:
  int64_t embed_dim_, num_heads_;
  std::shared_ptr<nn::Dense> qkv_, projection_;
  std::shared_ptr<nn::Dropout> attention_dropout_;
};

// projection(gelu(mapping(x))): embed_dim -> mlp_ratio * embed_dim -> embed_dim.
class GptMlp : public nn::Cell {
 public:
  GptMlp(int64_t embed_dim, int64_t hidden);
  Tensor construct(const Tensor& x) override;

  nn::Dense& mapping() { return *mapping_; }
  nn::Dense& projection() { return *projection_; }

 private:
  std::shared_ptr<nn::Dense> mapping_, projection_;
};

// x + attention(layernorm1(x)), then h + mlp(layernorm2(h)).
class GptBlock : public nn::Cell {
 public:
  explicit GptBlock(const GptConfig& config);
  Tensor construct(const Tensor& x) override;

  CausalSelfAttention& attention() { return *attention_; }
  GptMlp& mlp() { return *mlp_; }

 private:
  std::shared_ptr<nn::LayerNorm> layernorm1_, layernorm2_;
  std::shared_ptr<CausalSelfAttention> attention_;
  std::shared_ptr<GptMlp> mlp_;
  std::shared_ptr<nn::Dropout> residual_dropout_;
};

class Gpt : public nn::Cell {
 public:
  explicit Gpt(const GptConfig& config = {});
  Tensor construct(const Tensor& tokens) override;

  const GptConfig& config() const { return config_; }
  // Block i (0 <= i < num_layers), for SEMI_AUTO_PARALLEL strategies on its layers.
  GptBlock& block(int64_t i);
  // The one table both the input lookup and the output projection use.
  Tensor word_embedding_table() const { return word_embedding_->embedding_table(); }

 private:
  GptConfig config_;
  std::shared_ptr<nn::Embedding> word_embedding_, position_embedding_;
  std::shared_ptr<nn::Dropout> embedding_dropout_;
  std::shared_ptr<nn::SequentialCell> blocks_;
  std::shared_ptr<nn::LayerNorm> layernorm_;
};

}  // namespace kiln::models
