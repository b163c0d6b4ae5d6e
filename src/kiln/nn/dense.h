#pragma once
#include "kiln/nn/cell.h"
#include "kiln/nn/initializer.h"
#include "kiln/nn/primitive.h"

namespace kiln::nn {

struct DenseOptions {
  bool has_bias = true;
  // Null: MindSpore 2.x / PyTorch defaults, HeUniform(sqrt(5)) and U(±1/sqrt(in_channels)).
  InitializerPtr weight_init;
  InitializerPtr bias_init;
};

// y = x · weightᵀ + bias, weight [out_channels, in_channels] (MindSpore's layout).
class Dense : public Cell {
 public:
  Dense(int64_t in_channels, int64_t out_channels, DenseOptions options = {});
  Tensor construct(const Tensor& x) override;

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  Tensor weight() const { return weight_; }
  // Undefined when has_bias is false.
  Tensor bias() const { return bias_; }

  // The layer's ops, for SEMI_AUTO_PARALLEL strategies (MindSpore's `dense.matmul.shard(...)`):
  // matmul(x, weight) with the weight [out, in] as stored, then add(y, bias).
  Primitive& matmul() { return matmul_; }
  Primitive& bias_add() { return bias_add_; }

 private:
  int64_t in_, out_;
  Tensor weight_;
  Tensor bias_;  // undefined without bias
  Primitive matmul_{ops::OpKind::matmul};
  Primitive bias_add_{ops::OpKind::add};
};

}  // namespace kiln::nn
