// BatchNorm+ReLU forward and backward for the graph executor: oneDNN batch normalization with
// fuse_norm_relu, built once for the bound tensors. The statistics bookkeeping around the
// primitive (running mean/variance update, inv_std, variance recovered for backward) is the
// same arithmetic as the batch_norm / batch_norm_grad ops, so fused and unfused steps agree.
#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/graph/fused_kernels.h"
#include "kiln/ops/dnnl/context.h"

namespace kiln::graph {
namespace {
using namespace ops::dnnl_util;

const auto kFlags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift |
                    dnnl::normalization_flags::fuse_norm_relu;

void check_vector(const Tensor& t, int64_t c, const char* what) {
  if (t.dtype() != DType::f32 || t.shape() != Shape{c} || !t.is_contiguous()) {
    throw Error(std::string("fused batch_norm+relu: ") + what + " must be contiguous f32[" +
                std::to_string(c) + "], got " + describe(t));
  }
}

dnnl::batch_normalization_forward::primitive_desc forward_pd(const dnnl::memory::desc& data,
                                                             double eps) {
  return dnnl::batch_normalization_forward::primitive_desc(
      dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, data, float(eps),
                                              kFlags),
      scratchpad_attr(), engine());
}

class BnPrimitive : public SpecialKernel {
 protected:
  void bind(int arg, const dnnl::memory::desc& md, void* data) {
    args_[arg] = dnnl::memory(md, engine(), data);
  }
  void bind_scratch(const dnnl::primitive_desc_base& pd) {
    dnnl::memory::desc sp = pd.scratchpad_desc();
    scratch_bytes_ = sp.get_size();
    if (scratch_bytes_ > 0) {
      scratch_ = dnnl::memory(sp, engine(), DNNL_MEMORY_NONE);
      args_[DNNL_ARG_SCRATCHPAD] = scratch_;
    }
  }
  void execute() {
    if (scratch_bytes_ > 0) scratch_.set_data_handle(scratchpad(scratch_bytes_));
    prim_.execute(stream(), args_);
  }
  dnnl::primitive prim_;
  std::unordered_map<int, dnnl::memory> args_;
  dnnl::memory scratch_;
  size_t scratch_bytes_ = 0;
  std::vector<float> var_;
};

// inputs: x, gamma, beta, running_mean, running_var; outputs: r, mean, inv_std, workspace.
class BnReluForward : public BnPrimitive {
 public:
  BnReluForward(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : attrs_(node.attrs), in_(in.begin(), in.end()), out_(out.begin(), out.end()) {
    const Tensor& x = in[0];
    c_ = x.dim(1);
    for (int i = 1; i < 5; ++i) check_vector(in[size_t(i)], c_, "statistics and affine vectors");
    if (x.strides() != out[0].strides()) {
      throw Error("fused batch_norm+relu: input and output layouts differ");
    }
    count_ = x.numel() / std::max<int64_t>(c_, 1);
    var_.resize(size_t(c_));
    auto data = desc_of(x, "batch_norm");
    auto pd = forward_pd(data, attrs_.eps);
    if (int64_t(pd.workspace_desc().get_size()) > out[3].numel()) {
      throw Error("fused batch_norm+relu: workspace smaller than oneDNN asks");
    }
    prim_ = dnnl::batch_normalization_forward(pd);
    bind(DNNL_ARG_SRC, data, x.raw_data());
    bind(DNNL_ARG_DST, data, out[0].raw_data());
    bind(DNNL_ARG_SCALE, vector_desc(c_), in[1].raw_data());
    bind(DNNL_ARG_SHIFT, vector_desc(c_), in[2].raw_data());
    bind(DNNL_ARG_MEAN, vector_desc(c_), out[1].raw_data());
    bind(DNNL_ARG_VARIANCE, vector_desc(c_), var_.data());
    bind(DNNL_ARG_WORKSPACE, pd.workspace_desc(), out[3].raw_data());
    bind_scratch(pd);
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    if (count_ == 0) throw Error("fused batch_norm+relu: empty batch");
    execute();
    float* rm = in_[3].data<float>();
    float* rv = in_[4].data<float>();
    const float* mean = out_[1].data<float>();
    float* inv_std = out_[2].data<float>();
    // Running variance takes the unbiased batch variance (as the batch_norm op does).
    double m = attrs_.momentum, unbias = count_ > 1 ? double(count_) / double(count_ - 1) : 1.0;
    for (int64_t i = 0; i < c_; ++i) {
      double var = var_[size_t(i)];
      inv_std[i] = float(1.0 / std::sqrt(var + attrs_.eps));
      rm[i] = float(m * rm[i] + (1 - m) * mean[i]);
      rv[i] = float(m * rv[i] + (1 - m) * var * unbias);
    }
  }

 private:
  ops::Attrs attrs_;
  std::vector<Tensor> in_, out_;
  int64_t c_ = 0, count_ = 0;
};

// inputs: g (gradient of r), x, gamma, mean, inv_std, workspace; outputs: dx, dgamma, dbeta.
class BnReluBackward : public BnPrimitive {
 public:
  BnReluBackward(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : eps_(node.attrs.eps), inv_std_(in[4]) {
    const Tensor& x = in[1];
    c_ = x.dim(1);
    for (int i = 2; i < 5; ++i) check_vector(in[size_t(i)], c_, "statistics and gamma");
    if (in[0].strides() != x.strides() || out[0].strides() != x.strides()) {
      throw Error("fused relu_grad+batch_norm_grad: gradient and input layouts differ");
    }
    var_.resize(size_t(c_));
    auto data = desc_of(x, "batch_norm_grad");
    auto hint = forward_pd(data, eps_);
    dnnl::batch_normalization_backward::primitive_desc pd(
        dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, data, data, float(eps_),
                                                 kFlags),
        scratchpad_attr(), engine(), hint);
    prim_ = dnnl::batch_normalization_backward(pd);
    bind(DNNL_ARG_SRC, data, x.raw_data());
    bind(DNNL_ARG_DIFF_DST, data, in[0].raw_data());
    bind(DNNL_ARG_DIFF_SRC, data, out[0].raw_data());
    bind(DNNL_ARG_MEAN, vector_desc(c_), in[3].raw_data());
    bind(DNNL_ARG_VARIANCE, vector_desc(c_), var_.data());
    bind(DNNL_ARG_SCALE, vector_desc(c_), in[2].raw_data());
    // oneDNN 2.6 wants a shift argument in backward though nothing depends on it.
    bind(DNNL_ARG_SHIFT, vector_desc(c_), in[2].raw_data());
    bind(DNNL_ARG_DIFF_SCALE, vector_desc(c_), out[1].raw_data());
    bind(DNNL_ARG_DIFF_SHIFT, vector_desc(c_), out[2].raw_data());
    bind(DNNL_ARG_WORKSPACE, pd.workspace_desc(), in[5].raw_data());
    bind_scratch(pd);
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    const float* is = inv_std_.data<float>();
    for (int64_t i = 0; i < c_; ++i) {
      var_[size_t(i)] = float(1.0 / (double(is[i]) * double(is[i])) - eps_);
    }
    execute();
  }

 private:
  double eps_;
  Tensor inv_std_;
  int64_t c_ = 0;
};

}  // namespace

std::shared_ptr<SpecialKernel> make_bn_relu_kernel(const Node& node, std::span<const Tensor> inputs,
                                                   std::span<const Tensor> outputs) {
  if (node.type == NodeType::bn_relu) {
    return std::make_shared<BnReluForward>(node, inputs, outputs);
  }
  return std::make_shared<BnReluBackward>(node, inputs, outputs);
}

}  // namespace kiln::graph
