#include "kiln/ops/dnnl/context.h"

#include <string>

#include "kiln/core/allocator.h"
#include "kiln/core/error.h"

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
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    case DType::f16: return dt::f16;
    case DType::i32: return dt::s32;
    case DType::u8: return dt::u8;
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

dnnl::memory::desc vector_desc(int64_t n) { return dnnl::memory::desc({n}, dt::f32, tag::a); }

dnnl::primitive_attr scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
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

Runner::Runner(dnnl::primitive prim, const dnnl::primitive_desc_base& pd)
    : prim_(std::move(prim)) {
  dnnl::memory::desc sp = pd.scratchpad_desc();
  scratch_bytes_ = sp.get_size();
  if (scratch_bytes_ > 0) arg(DNNL_ARG_SCRATCHPAD, sp);
}

void Runner::arg(int arg, const dnnl::memory::desc& md) {
  // DNNL_MEMORY_NONE: the handle is set before every run.
  args_[arg] = dnnl::memory(md, engine(), DNNL_MEMORY_NONE);
}

void Runner::set(int arg, void* data) { args_.at(arg).set_data_handle(data); }

void Runner::run() {
  if (scratch_bytes_ > 0) set(DNNL_ARG_SCRATCHPAD, scratchpad(scratch_bytes_));
  prim_.execute(stream(), args_);
}

}  // namespace kiln::ops::dnnl_util
