#pragma once
// oneDNN plumbing shared by the nn ops: the process-wide CPU engine, a per-thread stream,
// memory descriptors that describe Kiln tensors in place (explicit strides, so a channels-last
// tensor is NHWC to oneDNN and nothing is reordered), and a per-thread primitive cache keyed by
// shapes, strides, dtypes and attributes.
//
// Why cache ourselves: building a primitive descriptor plus primitive costs 10s–100s of µs, while
// eager mode runs thousands of ops per second; oneDNN's own cache still pays for the descriptor.
// Why per thread: a cached entry keeps its dnnl::memory objects and argument map, and only swaps
// data handles on each call, which must not race with another thread using the same entry.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>

#include "kiln/core/kernel_threads.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln::ops::dnnl_util {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

const dnnl::engine& engine();
// One stream per thread: a CPU stream runs primitives on the calling thread (and the OpenMP
// pool), and sharing one across threads is not allowed.
dnnl::stream& stream();

// oneDNN data type of a Kiln dtype; throws naming `op` when oneDNN has none.
dt data_type(DType dtype, std::string_view op);

// A plain (strided) descriptor of the tensor's logical shape and strides: no copy, no reorder.
dnnl::memory::desc desc_of(const Tensor& t, std::string_view op);
dnnl::memory::desc desc_of(const Shape& shape, const Strides& strides, DType dtype,
                           std::string_view op);
dnnl::memory::desc desc_of(const TensorMeta& meta, std::string_view op);
// A rank-1 f32 descriptor (scale/shift/statistics vectors).
dnnl::memory::desc vector_desc(int64_t n);

// Primitive attributes with a user-managed scratchpad (see Scratchpad).
dnnl::primitive_attr scratchpad_attr();

// A forward convolution primitive descriptor, choosing the implementation ourselves where
// oneDNN 2.6's default order is slow on this CPU: it lists brgconv first for f32 channels-last
// convolutions, but for few input channels (<= 16, the reduction per output is short) its direct
// jit:avx512_core kernel is faster (measured single-threaded, batch 64–128: LeNet's 1->6 and
// 6->16 5x5 convs 0.35 -> 0.20 and 0.21 -> 0.16 ms, ResNet-20's 16->16 3x3 at 28x28 2.6 -> 2.1 ms;
// from 32 channels on brgconv is as fast or faster). In bf16 without AMX its direct
// jit_bf16:avx512_core_bf16 kernel is as fast or faster at every ResNet-20 shape (2 threads, AMD
// Zen 5, batch 128: 16->16 3x3 at 28x28 0.67 -> 0.56 ms, 64->64 at 7x7 0.56 -> 0.50, stride 2
// 16->32 0.35 -> 0.30; 32->32 at 14x14 a tie). Eager ops and graph kernels both build through
// this so that they run the same kernel and give the same bits.
dnnl::convolution_forward::primitive_desc conv_forward_pd(
    const dnnl::convolution_forward::desc& desc, const dnnl::primitive_attr& attr,
    const dnnl::memory::desc& src, const dnnl::memory::desc& weights);

// The shapes oneDNN's Winograd F(4x4, 3x3) may take: f32, ungrouped 3x3, stride 1, no dilation,
// channels in and out multiples of 16 (oneDNN may still decline one, e.g. for its padding).
bool dnnl_winograd_fits(DType dtype, const Shape& x, const Shape& w, const ConvAttrs& attrs);

// Whether oneDNN's Winograd is wanted for a convolution dnnl_winograd_fits, as
// Context::conv_algorithm says: "auto" from `auto_min_channels` channels in and out on, where it
// is faster (see ops/nn/conv.cpp), "winograd" always, "direct" never.
bool dnnl_winograd_chosen(const Shape& x, const Shape& w, int64_t auto_min_channels);

// Whether conv2d runs this convolution as Winograd F(4x4, 3x3) on activations staged through
// oneDNN's blocked layout (see ops/nn/conv.cpp for the measurements behind the rule):
// dnnl_winograd_fits and chosen, from 64 channels under "auto".
bool winograd_conv(DType dtype, const Shape& x, const Shape& w, const ConvAttrs& attrs);

// Whether oneDNN has fast (JIT) convolutions on the blocked nChw16c activation layout on this
// CPU: its 16-channel blocks are AVX-512's. Without avx512_core (an AVX2-only CPU, whose own
// block is 8) every convolution on nChw16c falls back to oneDNN's reference kernel (ref:any),
// one to two orders of magnitude slower than channels-last.
bool dnnl_nchw16c_native();

// The interned name ops/kernel_name.h notes for a primitive: its implementation
// (impl_info_str), a reorder's prefixed with "reorder ".
const char* kernel_name_of(const dnnl::primitive_desc_base& pd);

// Per-thread scratch memory for primitives, grown to the largest request and then kept: a
// fresh buffer per call would fault its pages in every time.
void* scratchpad(size_t bytes);

// A cache key: a short list of integers (op tag, shapes, strides, dtypes, attributes) stored
// inline, so building one allocates nothing.
class PrimitiveKey {
 public:
  static constexpr int kCapacity = 96;
  PrimitiveKey& add(int64_t v) {
    if (n_ < kCapacity) v_[n_] = v;
    ++n_;
    return *this;
  }
  PrimitiveKey& add(const Tensor& t) { return add(t.shape(), t.strides(), t.dtype()); }
  PrimitiveKey& add(const Shape& s, const Strides& st, DType d) {
    add(int64_t(d)).add(s.rank());
    for (int64_t x : s) add(x);
    for (int64_t x : st) add(x);
    return *this;
  }
  PrimitiveKey& add(const Shape& s) {
    add(s.rank());
    for (int64_t x : s) add(x);
    return *this;
  }
  PrimitiveKey& add_double(double d) {
    int64_t bits;
    std::memcpy(&bits, &d, 8);
    return add(bits);
  }
  bool operator==(const PrimitiveKey& o) const {
    return n_ == o.n_ &&
           std::memcmp(v_, o.v_, sizeof(int64_t) * size_t(std::min(n_, kCapacity))) == 0;
  }
  size_t hash() const {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < std::min(n_, kCapacity); ++i) h = (h ^ uint64_t(v_[i])) * 1099511628211ull;
    return size_t(h ^ uint64_t(n_));
  }
  bool overflowed() const { return n_ > kCapacity; }

 private:
  int64_t v_[kCapacity];
  int n_ = 0;
};

struct PrimitiveKeyHash {
  size_t operator()(const PrimitiveKey& k) const { return k.hash(); }
};

// A ready-to-run primitive: its memory objects are created once; each call only points them at
// the tensors' data and executes.
class PrimitiveRunner {
 public:
  PrimitiveRunner() = default;
  PrimitiveRunner(dnnl::primitive prim, const dnnl::primitive_desc_base& pd);
  // Declares argument `arg` with descriptor `md` (data handle set per call).
  void arg(int arg, const dnnl::memory::desc& md);
  // Points argument `arg` at `data` for the next run().
  void set(int arg, void* data);
  void run();
  dnnl::memory::desc desc(int arg) const { return args_.at(arg).get_desc(); }
  size_t scratchpad_bytes() const { return scratch_bytes_; }

 private:
  dnnl::primitive prim_;
  std::unordered_map<int, dnnl::memory> args_;
  size_t scratch_bytes_ = 0;
  const char* kernel_name_ = "";  // noted on each run (ops/kernel_name.h)
};

// A plain matmul dst = src · weights over these layouts (user scratchpad), arguments declared.
PrimitiveRunner matmul_runner(const dnnl::memory::desc& src, const dnnl::memory::desc& weights,
                              const dnnl::memory::desc& dst);

// A per-thread cache of T (usually a struct of PrimitiveRunners) keyed by PrimitiveKey and the
// threads the calling launch uses (core/kernel_threads.h): a primitive made for one thread is
// only ever run with one. When full, it is cleared: eager training loops use a handful of shapes,
// so an LRU would buy nothing.
template <class T>
class PrimitiveCache {
 public:
  static constexpr size_t kCapacity = 4096;
  template <class Build>
  T& get(const PrimitiveKey& shapes_key, Build&& build) {
    PrimitiveKey key = shapes_key;
    key.add(current_kernel_threads());
    if (key.overflowed()) {
      // Too many dims to key inline (never for the ops here); build without caching.
      overflow_ = std::make_unique<T>(build());
      return *overflow_;
    }
    auto it = map_.find(key);
    if (it != map_.end()) return *it->second;
    if (map_.size() >= kCapacity) map_.clear();
    return *map_.emplace(key, std::make_unique<T>(build())).first->second;
  }
  size_t size() const { return map_.size(); }

 private:
  std::unordered_map<PrimitiveKey, std::unique_ptr<T>, PrimitiveKeyHash> map_;
  std::unique_ptr<T> overflow_;
};

// Copies src into dst (same shape; layouts and dtypes may differ) with a cached oneDNN reorder.
void reorder(const Tensor& src, Tensor& dst);
// The tensor itself when it is channels-last already, else a channels-last copy (used at the
// edges: a network's input, a gradient arriving row-major from a reshape).
Tensor to_channels_last(const Tensor& t);

// dims of a Kiln shape.
inline dims to_dims(const Shape& s) {
  return dims(s.begin(), s.end());
}

}  // namespace kiln::ops::dnnl_util
