#pragma once
#include "kiln/nn/cell.h"
#include "kiln/nn/initializer.h"

namespace kiln::nn {

struct EmbeddingOptions {
  InitializerPtr embedding_table_init;  // null: Normal(0.01), MindSpore's default
};

// Looks up rows of "embedding_table" [vocab_size, embedding_size] for integer indices of any
// shape; the output has shape indices.shape + [embedding_size].
class Embedding : public Cell {
 public:
  Embedding(int64_t vocab_size, int64_t embedding_size, EmbeddingOptions options = {});
  Tensor construct(const Tensor& indices) override;
  Tensor embedding_table() const { return table_; }

 private:
  int64_t vocab_size_, embedding_size_;
  Tensor table_;
};

}  // namespace kiln::nn
