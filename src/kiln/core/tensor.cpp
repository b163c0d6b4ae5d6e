#include "kiln/core/tensor.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kiln/core/allocator.h"
#include "kiln/core/error.h"
#include "kiln/core/strided_copy.h"

namespace kiln {

Storage::Storage(size_t bytes)
    : data_(allocator::allocate(bytes)), bytes_(bytes), owned_(true), writes_(0) {}

Storage::Storage(void* data, size_t bytes, std::shared_ptr<void> keeper)
    : data_(data), bytes_(bytes), owned_(false), keeper_(std::move(keeper)), writes_(kUntracked) {}

void Storage::note_write() {
  uint64_t seen = writes_.load(std::memory_order_relaxed);
  while (seen != kUntracked &&
         !writes_.compare_exchange_weak(seen, seen + 1, std::memory_order_acq_rel)) {
  }
}

void Storage::borrow(void* data, std::shared_ptr<void> keeper) {
  if (owned_) throw Error("Storage::borrow: this storage owns its memory");
  data_ = data;
  keeper_ = std::move(keeper);
}

Storage::~Storage() {
  if (owned_) allocator::release(data_, bytes_);
}

namespace {

std::shared_ptr<TensorImpl> make_impl(const Shape& shape, const Strides& strides, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  for (int64_t d : shape) {
    if (d < 0) throw ShapeError("tensor shape " + shape.str() + " has a negative dimension");
  }
  // Span of memory the strides reach: the largest offset plus one.
  int64_t span = 1;
  bool empty = false;
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] == 0) empty = true;
    span += (shape[i] - 1) * strides[size_t(i)];
  }
  impl->storage = std::make_shared<Storage>(size_t(empty ? 0 : span) * dtype_size(dtype));
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = dtype;
  return impl;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  return Tensor(make_impl(shape, contiguous_strides(shape), dtype));
}

Tensor Tensor::empty_strided(const Shape& shape, const Strides& strides, DType dtype) {
  if (int(strides.size()) != shape.rank()) {
    throw ShapeError("empty_strided: " + std::to_string(strides.size()) + " strides for shape " +
                     shape.str());
  }
  return Tensor(make_impl(shape, strides, dtype));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) {
  return full(shape, 1.0, dtype);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  fill(t.raw_data(), dtype, value, t.numel());
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) {
  return full(Shape{}, value, dtype);
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  Tensor f = from_vector(v, Shape{n});
  if (dtype == DType::f32) return f;
  Tensor t = empty(Shape{n}, dtype);
  t.copy_from(f);
  return t;
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  if (int64_t(values.size()) != shape.numel()) {
    throw ShapeError("from_vector: " + std::to_string(values.size()) + " values for shape " +
                     shape.str());
  }
  Tensor t = empty(shape, dtype_of<T>());
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int32_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int64_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<uint8_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<bf16_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<f16_t>&, const Shape&);

Tensor Tensor::empty_like(const Tensor& other) {
  if (other.is_channels_last() && !other.is_contiguous()) {
    return empty_strided(other.shape(), channels_last_strides(other.shape()), other.dtype());
  }
  return empty(other.shape(), other.dtype());
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype,
                         std::shared_ptr<void> keeper) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      std::make_shared<Storage>(data, size_t(shape.numel()) * dtype_size(dtype), std::move(keeper));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::traced(const Shape& shape, DType dtype, int64_t value, const void* graph) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->traced_value = value;
  impl->trace_graph = graph;
  return Tensor(std::move(impl));
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape()[i] != 1 && strides()[size_t(i)] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

bool Tensor::is_dense() const {
  if (is_contiguous()) return true;
  // Sort dimensions by stride; dense when each stride equals the product of the smaller extents.
  std::vector<int> order(static_cast<size_t>(rank()));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return strides()[size_t(a)] < strides()[size_t(b)]; });
  int64_t expected = 1;
  for (int d : order) {
    if (shape()[d] == 1) continue;
    if (strides()[size_t(d)] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

bool Tensor::is_channels_last() const {
  return rank() == 4 && strides() == channels_last_strides(shape());
}

void* Tensor::raw_data() const {
  if (!impl_) throw Error("raw_data() on an undefined tensor");
  if (!impl_->storage) throw Error("raw_data() on a traced tensor " + describe(*this));
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * int64_t(dtype_size(dtype()));
}

void Tensor::check_dtype(DType expected) const {
  if (!impl_) throw Error("data() on an undefined tensor");
  if (dtype() != expected) {
    throw Error(detail::concat("data<", dtype_name(expected), ">() on a tensor of dtype ",
                               dtype_name(dtype())));
  }
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = contiguous();
  std::vector<T> out(static_cast<size_t>(numel()));
  if (dtype() == dtype_of<T>()) {
    if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size() * sizeof(T));
  } else {
    convert(c.raw_data(), dtype(), out.data(), dtype_of<T>(), numel());
  }
  return out;
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<int32_t> Tensor::to_vector() const;
template std::vector<int64_t> Tensor::to_vector() const;
template std::vector<uint8_t> Tensor::to_vector() const;

template <class T>
T Tensor::item() const {
  if (numel() != 1)
    throw ShapeError("item() on a tensor with " + std::to_string(numel()) + " elements " +
                     describe(*this));
  return to_vector<T>()[0];
}
template float Tensor::item() const;
template int32_t Tensor::item() const;
template int64_t Tensor::item() const;
template uint8_t Tensor::item() const;

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = empty(shape(), dtype());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype());
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape() != shape()) {
    throw ShapeError("copy_from: shape " + src.shape().str() + " into " + shape().str());
  }
  mark_written();
  if (src.dtype() == dtype()) {
    strided_copy(src, *this);
    return;
  }
  if (!is_dense()) {
    // A destination with gaps: converted into a contiguous copy first.
    Tensor converted = Tensor::empty(shape(), dtype());
    converted.copy_from(src);
    strided_copy(converted, *this);
    return;
  }
  // Another dtype: rearranged (in the source's dtype) into this tensor's layout where the two
  // differ, then converted in one flat pass.
  const bool same_layout =
      src.is_dense() && (src.strides() == strides() || (src.is_contiguous() && is_contiguous()));
  Tensor staged = src;
  if (!same_layout) {
    staged = Tensor::empty_strided(shape(), strides(), src.dtype());
    strided_copy(src, staged);
  }
  convert(staged.raw_data(), src.dtype(), raw_data(), dtype(), numel());
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->dtype = impl_->dtype;
  impl->traced_value = impl_->traced_value;
  impl->trace_graph = impl_->trace_graph;
  return Tensor(std::move(impl));
}

Tensor Tensor::view_as(const Shape& shape, const Strides& strides, int64_t offset) const {
  Tensor t = detach();
  t.impl_->shape = shape;
  t.impl_->strides = strides;
  t.impl_->offset = offset;
  return t;
}

Tensor& Tensor::set_requires_grad(bool on) {
  if (on && !is_floating(dtype())) {
    throw Error("requires_grad on a tensor of dtype " + std::string(dtype_name(dtype())) +
                ": only floating-point tensors can have gradients");
  }
  autograd_meta().requires_grad = on;
  return *this;
}

AutogradMeta& Tensor::autograd_meta() const {
  if (!impl_->autograd) impl_->autograd = std::make_unique<AutogradMeta>();
  return *impl_->autograd;
}

Tensor Tensor::grad() const {
  if (!impl_ || !impl_->autograd || !impl_->autograd->grad) return Tensor();
  return Tensor(impl_->autograd->grad);
}

void Tensor::set_grad(const Tensor& g) {
  autograd_meta().grad = g.impl_ptr();
}

void Tensor::zero_grad() {
  if (impl_ && impl_->autograd) impl_->autograd->grad.reset();
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(dtype_name(t.dtype())) + t.shape().str();
}

std::string Tensor::str() const {
  return "Tensor[" + describe(*this) + "]";
}

}  // namespace kiln
