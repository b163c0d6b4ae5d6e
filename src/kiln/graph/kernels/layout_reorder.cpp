// The reorder node of passes/block_layout.cpp: a 4-D activation from channels-last (as its
// strides say) into oneDNN's blocked nChw16c layout or back, as one oneDNN reorder built at
// bind time.
#include <oneapi/dnnl/dnnl.hpp>

#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/ops/dnnl/context.h"
#include "kiln/ops/kernel_name.h"

namespace kiln::graph {
namespace {
using namespace ops::dnnl_util;

class LayoutReorder : public SpecialKernel {
 public:
  LayoutReorder(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out) {
    const Tensor& x = in[0];
    const Tensor& y = out[0];
    if (x.rank() != 4 || !x.is_channels_last() || y.shape() != x.shape() ||
        y.dtype() != x.dtype() || !y.is_channels_last() || x.dim(1) % 16 != 0) {
      throw Error(node_label(node) + ": expects channels-last [N, C, H, W] with C a multiple of " +
                  "16 on both sides, got " + describe(x) + " -> " + describe(y));
    }
    dnnl::memory::desc plain = desc_of(x, "reorder");
    dnnl::memory::desc blocked(plain.dims(), plain.data_type(), dnnl::memory::format_tag::nChw16c);
    const bool to_blocked = output_is_nchw16c(node, 0);
    const dnnl::memory::desc& from = to_blocked ? plain : blocked;
    const dnnl::memory::desc& to = to_blocked ? blocked : plain;
    dnnl::reorder::primitive_desc pd(engine(), from, engine(), to);
    reorder_ = dnnl::reorder(pd);
    kernel_name_ = kernel_name_of(pd);
    args_ = {{DNNL_ARG_FROM, dnnl::memory(from, engine(), x.raw_data())},
             {DNNL_ARG_TO, dnnl::memory(to, engine(), y.raw_data())}};
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    ops::note_kernel(kernel_name_);
    reorder_.execute(stream(), args_);
  }

 private:
  dnnl::reorder reorder_;
  const char* kernel_name_ = "";
  std::unordered_map<int, dnnl::memory> args_;
};

}  // namespace

std::shared_ptr<SpecialKernel> make_layout_reorder_kernel(const Node& node,
                                                          std::span<const Tensor> inputs,
                                                          std::span<const Tensor> outputs) {
  return std::make_shared<LayoutReorder>(node, inputs, outputs);
}

}  // namespace kiln::graph
