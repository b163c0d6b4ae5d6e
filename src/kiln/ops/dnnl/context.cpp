#include "kiln/ops/dnnl/context.h"

#include <string>
#include <string_view>

#include "kiln/core/allocator.h"
#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/ops/cpu_support.h"
#include "kiln/ops/kernel_name.h"

namespace kiln::ops::dnnl_util {

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

dt data_type(DType dtype, std::string_view op) {
  switch (dtype) {
    case DType::f32:
      return dt::f32;
    case DType::bf16:
      return dt::bf16;
    case DType::f16:
      return dt::f16;
    case DType::i32:
      return dt::s32;
    case DType::u8:
      return dt::u8;
    default:
      throw ShapeError(std::string(op) + ": dtype " + std::string(dtype_name(dtype)) +
                       " is not supported");
  }
}

dnnl::memory::desc desc_of(const Shape& shape, const Strides& strides, DType dtype,
                           std::string_view op) {
  // A rank-0 tensor is a one-element vector to oneDNN.
  if (shape.rank() == 0) return dnnl::memory::desc({1}, data_type(dtype, op), dims{1});
  return dnnl::memory::desc(to_dims(shape), data_type(dtype, op),
                            dims(strides.begin(), strides.end()));
}

dnnl::memory::desc desc_of(const Tensor& t, std::string_view op) {
  return desc_of(t.shape(), t.strides(), t.dtype(), op);
}

dnnl::memory::desc desc_of(const TensorMeta& meta, std::string_view op) {
  Strides st = meta.layout == Layout::channels_last ? channels_last_strides(meta.shape)
                                                    : contiguous_strides(meta.shape);
  return desc_of(meta.shape, st, meta.dtype, op);
}

dnnl::memory::desc vector_desc(int64_t n) {
  return dnnl::memory::desc({n}, dt::f32, tag::a);
}

dnnl::primitive_attr scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::convolution_forward::primitive_desc conv_forward_pd(
    const dnnl::convolution_forward::desc& desc, const dnnl::primitive_attr& attr,
    const dnnl::memory::desc& src, const dnnl::memory::desc& weights) {
  dnnl::convolution_forward::primitive_desc pd(desc, attr, engine());
  const dnnl::memory::dims wd = weights.dims();
  // Plain (ungrouped) OIHW weights, not 1x1 (brgconv_1x1 is the fast one there).
  const bool spatial = wd.size() == 4 && (wd[2] > 1 || wd[3] > 1);
  const std::string_view first = pd.impl_info_str();
  const char* preferred = nullptr;
  if (spatial && wd[1] <= 16 && src.data_type() == dt::f32 && first.rfind("brgconv:", 0) == 0) {
    preferred = "jit:avx512_core";
  } else if (spatial && src.data_type() == dt::bf16 && first == "brgconv:avx512_core_bf16") {
    preferred = "jit_bf16:avx512_core_bf16";  // without AMX; with it brgconv runs on the tiles
  }
  if (!preferred) return pd;
  // next_impl() moves the descriptor itself, so search a second one and keep the first if the
  // direct kernel is not on offer (it declines some shapes).
  dnnl::convolution_forward::primitive_desc alt(desc, attr, engine());
  while (alt.next_impl()) {
    if (std::string_view(alt.impl_info_str()) == preferred) return alt;
  }
  return pd;
}

bool dnnl_nchw16c_native() {
  return dnnl_has_avx512_core();
}

bool dnnl_winograd_fits(DType dtype, const Shape& x, const Shape& w, const ConvAttrs& a) {
  return dtype == DType::f32 && x.rank() == 4 && w.rank() == 4 && a.groups == 1 && w[2] == 3 &&
         w[3] == 3 && a.stride[0] == 1 && a.stride[1] == 1 && a.dilation[0] == 1 &&
         a.dilation[1] == 1 && x[1] % 16 == 0 && w[0] % 16 == 0;
}

bool dnnl_winograd_chosen(const Shape& x, const Shape& w, int64_t auto_min_channels) {
  const std::string& algorithm = get_context().conv_algorithm;
  if (algorithm == "direct") return false;
  return algorithm == "winograd" || (x[1] >= auto_min_channels && w[0] >= auto_min_channels);
}

bool winograd_conv(DType dtype, const Shape& x, const Shape& w, const ConvAttrs& a) {
  return dnnl_winograd_fits(dtype, x, w, a) && dnnl_winograd_chosen(x, w, 64);
}

namespace {
struct ScratchBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  ~ScratchBuffer() {
    if (data) allocator::release(data, bytes);
  }
};
}  // namespace

void* scratchpad(size_t bytes) {
  thread_local ScratchBuffer buf;
  if (bytes > buf.bytes) {
    if (buf.data) allocator::release(buf.data, buf.bytes);
    buf.data = allocator::allocate(bytes);
    buf.bytes = bytes;
  }
  return buf.data;
}

const char* kernel_name_of(const dnnl::primitive_desc_base& pd) {
  const std::string impl = pd.impl_info_str();
  return intern_kernel_name(pd.get_kind() == dnnl::primitive::kind::reorder ? "reorder " + impl
                                                                            : impl);
}

PrimitiveRunner::PrimitiveRunner(dnnl::primitive prim, const dnnl::primitive_desc_base& pd)
    : prim_(std::move(prim)), kernel_name_(kernel_name_of(pd)) {
  dnnl::memory::desc sp = pd.scratchpad_desc();
  scratch_bytes_ = sp.get_size();
  if (scratch_bytes_ > 0) arg(DNNL_ARG_SCRATCHPAD, sp);
}

PrimitiveRunner matmul_runner(const dnnl::memory::desc& src, const dnnl::memory::desc& weights,
                              const dnnl::memory::desc& dst) {
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), scratchpad_attr(),
                                  engine());
  PrimitiveRunner run(dnnl::matmul(pd), pd);
  run.arg(DNNL_ARG_SRC, src);
  run.arg(DNNL_ARG_WEIGHTS, weights);
  run.arg(DNNL_ARG_DST, dst);
  return run;
}

void PrimitiveRunner::arg(int arg, const dnnl::memory::desc& md) {
  // DNNL_MEMORY_NONE: the handle is set before every run.
  args_[arg] = dnnl::memory(md, engine(), DNNL_MEMORY_NONE);
}

void PrimitiveRunner::set(int arg, void* data) {
  args_.at(arg).set_data_handle(data);
}

void PrimitiveRunner::run() {
  if (scratch_bytes_ > 0) set(DNNL_ARG_SCRATCHPAD, scratchpad(scratch_bytes_));
  note_kernel(kernel_name_);
  prim_.execute(stream(), args_);
}

void reorder(const Tensor& src, Tensor& dst) {
  if (src.numel() == 0) return;
  PrimitiveKey key;
  key.add(src).add(dst);
  thread_local PrimitiveCache<PrimitiveRunner> cache;
  PrimitiveRunner& r = cache.get(key, [&] {
    auto s = desc_of(src, "reorder"), d = desc_of(dst, "reorder");
    dnnl::reorder::primitive_desc pd(engine(), s, engine(), d, scratchpad_attr());
    PrimitiveRunner run(dnnl::reorder(pd), pd);
    run.arg(DNNL_ARG_FROM, s);
    run.arg(DNNL_ARG_TO, d);
    return run;
  });
  r.set(DNNL_ARG_FROM, src.raw_data());
  r.set(DNNL_ARG_TO, dst.raw_data());
  r.run();
}

Tensor to_channels_last(const Tensor& t) {
  if (t.rank() != 4 || t.is_channels_last()) return t;
  // Memory already in NHWC order (C == 1, or H == W == 1): relabel the strides, copy nothing.
  Strides cl = channels_last_strides(t.shape());
  bool same_memory_order = true;
  for (int i = 0; i < 4; ++i) {
    if (t.shape()[i] != 1 && t.strides()[size_t(i)] != cl[size_t(i)]) same_memory_order = false;
  }
  if (same_memory_order) return t.view_as(t.shape(), cl, t.offset());
  Tensor out = Tensor::empty_strided(t.shape(), channels_last_strides(t.shape()), t.dtype());
  reorder(t, out);
  return out;
}

}  // namespace kiln::ops::dnnl_util
