#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/shape.h"

namespace kiln {

// A block of memory that tensors view. Owned blocks come from (and go back to) the caching
// allocator; borrowed blocks (a graph arena, a memory-mapped file) are kept alive by `keeper`.
class Storage {
 public:
  explicit Storage(size_t bytes);                                   // owned
  Storage(void* data, size_t bytes, std::shared_ptr<void> keeper);  // borrowed
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Points a borrowed storage at other memory of at least its size: a compiled graph's input
  // reads each step's batch where the caller keeps it, through tensors bound once.
  void borrow(void* data, std::shared_ptr<void> keeper);

  // How many times Kiln has written this memory (Tensor::mark_written). A compiled graph that
  // keeps something derived from a parameter between steps (its bf16 copy,
  // graph/passes/bf16_weight_copies.cpp) derives it again when the count moved since it last
  // did. Memory that code outside Kiln may write unseen is untracked, and such derived copies
  // are made afresh every step: borrowed memory (a caller's buffer, a numpy array) always, and
  // owned memory once a writable view of it has left Kiln (mark_untracked; numpy views do).
  static constexpr uint64_t kUntracked = ~uint64_t(0);
  uint64_t writes() const { return writes_.load(std::memory_order_acquire); }
  void note_write();
  void mark_untracked() { writes_.store(kUntracked, std::memory_order_release); }

 private:
  void* data_;
  size_t bytes_;
  bool owned_;
  std::shared_ptr<void> keeper_;
  std::atomic<uint64_t> writes_;
};

struct GradNode;  // defined by autograd/

// Per-tensor autograd state, present only on tensors that take part in differentiation.
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<GradNode> grad_fn;  // null for leaves
  int output_index = 0;               // which output of grad_fn this tensor is
  std::shared_ptr<struct TensorImpl> grad;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Strides strides;
  DType dtype = DType::f32;
  std::unique_ptr<AutogradMeta> autograd;
  // Set while graph mode traces: the SSA value this tensor stands for. A traced tensor has no
  // storage; ops called on it are recorded instead of run.
  int64_t traced_value = -1;
  const void* trace_graph = nullptr;
};

// A handle to a tensor: copies share the same data and autograd state (like PyTorch).
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. Memory from empty() is uninitialised.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor empty_strided(const Shape& shape, const Strides& strides, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  static Tensor scalar(double value, DType dtype = DType::f32);
  static Tensor arange(int64_t n, DType dtype = DType::f32);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // Same shape and dtype; channels-last inputs give channels-last outputs.
  static Tensor empty_like(const Tensor& other);
  // A view over memory owned by someone else (kept alive by `keeper`).
  static Tensor from_blob(void* data, const Shape& shape, DType dtype,
                          std::shared_ptr<void> keeper = nullptr);
  // A symbolic tensor for the graph tracer: shape and dtype only.
  static Tensor traced(const Shape& shape, DType dtype, int64_t value, const void* graph);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  int rank() const { return impl_->shape.rank(); }
  int64_t dim(int i) const { return impl_->shape.dim(i); }
  int64_t numel() const { return impl_->shape.numel(); }
  DType dtype() const { return impl_->dtype; }
  const Strides& strides() const { return impl_->strides; }
  int64_t offset() const { return impl_->offset; }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  bool is_contiguous() const;
  // Every element stored exactly once with no gaps, in some dimension order (contiguous or
  // channels-last, say): elementwise kernels can then walk memory flat.
  bool is_dense() const;
  bool is_channels_last() const;
  bool is_traced() const { return impl_ && impl_->traced_value >= 0; }

  void* raw_data() const;
  template <class T>
  T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(raw_data());
  }

  // Element values converted to T, in logical (row-major) order, whatever the strides.
  template <class T>
  std::vector<T> to_vector() const;
  template <class T>
  T item() const;

  // A contiguous copy when needed; the same tensor when already contiguous. No autograd.
  Tensor contiguous() const;
  // A deep, contiguous copy with no autograd state.
  Tensor clone() const;
  // Copies values from src (same shape; dtype converted). No autograd. Marks this tensor written.
  void copy_from(const Tensor& src);
  // Records that this tensor's memory was written (Storage::writes). Ops that write an input
  // in place, copy_from and compiled graphs' updates call it; code that writes a parameter
  // through data<T>() or raw_data() between compiled steps must call it too, or a compiled
  // mixed-precision step may go on using the bf16 copy of the old value.
  void mark_written() const {
    if (impl_ && impl_->storage) impl_->storage->note_write();
  }
  // Shares data, drops autograd state.
  Tensor detach() const;
  // A tensor viewing the same storage with another shape/strides/offset. No autograd.
  Tensor view_as(const Shape& shape, const Strides& strides, int64_t offset) const;

  // Autograd.
  bool requires_grad() const { return impl_ && impl_->autograd && impl_->autograd->requires_grad; }
  Tensor& set_requires_grad(bool on);
  Tensor grad() const;
  void set_grad(const Tensor& g);
  void zero_grad();
  AutogradMeta& autograd_meta() const;  // creates it on first use

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }
  std::string str() const;  // "Tensor[f32, [2, 3]]"

 private:
  void check_dtype(DType expected) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::string describe(const Tensor& t);  // "f32[2, 3]", for error messages

}  // namespace kiln
