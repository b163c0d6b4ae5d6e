#include "kiln/nn/embedding.h"

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::nn {

Embedding::Embedding(int64_t vocab_size, int64_t embedding_size, EmbeddingOptions options)
    : Cell("Embedding"), vocab_size_(vocab_size), embedding_size_(embedding_size) {
  if (vocab_size <= 0 || embedding_size <= 0) {
    throw Error("Embedding: vocab_size and embedding_size must be > 0, got " +
                std::to_string(vocab_size) + " and " + std::to_string(embedding_size));
  }
  InitializerPtr init = options.embedding_table_init ? options.embedding_table_init : Normal(0.01);
  table_ = register_parameter("embedding_table", initializer(init, {vocab_size, embedding_size}));
}

Tensor Embedding::construct(const Tensor& indices) {
  if (indices.dtype() != DType::i32 && indices.dtype() != DType::i64) {
    throw ShapeError("Embedding: indices must be i32 or i64, got " + describe(indices));
  }
  return ops::embedding(table_, indices);
}

}  // namespace kiln::nn
