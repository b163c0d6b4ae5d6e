// Copies between tensors of one shape and dtype whose strides differ (see strided_copy.h).
#include "kiln/core/strided_copy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/core/error.h"

namespace kiln {
namespace {

// Below this many elements a copy runs on one thread: an OpenMP fork costs more than it saves.
constexpr int64_t kParallelElements = 65536;

struct Dim {
  int64_t size, src, dst;  // extent, source stride, destination stride (in elements)
};

// Dimensions in the destination's memory order (largest stride first), size-1 dimensions
// dropped, neighbours merged wherever both sides walk them as one.
std::vector<Dim> coalesce(const Tensor& src, const Tensor& dst) {
  std::vector<Dim> dims;
  for (int i = 0; i < dst.rank(); ++i) {
    if (dst.shape()[i] != 1) {
      dims.push_back({dst.shape()[i], src.strides()[size_t(i)], dst.strides()[size_t(i)]});
    }
  }
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) {
    return a.dst != b.dst ? a.dst > b.dst : a.src > b.src;
  });
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty() && merged.back().src == d.src * d.size &&
        merged.back().dst == d.dst * d.size) {
      merged.back() = {merged.back().size * d.size, d.src, d.dst};
    } else {
      merged.push_back(d);
    }
  }
  if (merged.empty()) merged.push_back({1, 0, 0});
  return merged;
}

// Source and destination offsets of multi-index `linear` over `dims` (row-major over dims).
inline void offsets_of(int64_t linear, const std::vector<Dim>& dims, int64_t* so, int64_t* dof) {
  int64_t s = 0, d = 0;
  for (int k = int(dims.size()) - 1; k >= 0; --k) {
    int64_t idx = linear % dims[size_t(k)].size;
    linear /= dims[size_t(k)].size;
    s += idx * dims[size_t(k)].src;
    d += idx * dims[size_t(k)].dst;
  }
  *so = s;
  *dof = d;
}

template <class T>
void copy_transposed(const T* s, T* d, const std::vector<Dim>& dims, int t, int64_t numel) {
  constexpr int64_t kBlock = 32;
  const Dim& a_dim = dims[size_t(t)];  // source-contiguous
  const Dim& b_dim = dims.back();      // destination-contiguous
  std::vector<Dim> others;
  for (size_t k = 0; k + 1 < dims.size(); ++k) {
    if (int(k) != t) others.push_back(dims[k]);
  }
  int64_t n_others = 1;
  for (const Dim& o : others) n_others *= o.size;
  const int64_t a_blocks = (a_dim.size + kBlock - 1) / kBlock;
  const int64_t b_blocks = (b_dim.size + kBlock - 1) / kBlock;
  const int64_t work = n_others * a_blocks * b_blocks;
  const int64_t bs = b_dim.src, ad = a_dim.dst;
#pragma omp parallel for schedule(static) if (numel > kParallelElements)
  for (int64_t w = 0; w < work; ++w) {
    int64_t o = w / (a_blocks * b_blocks), rem = w % (a_blocks * b_blocks);
    int64_t a0 = rem / b_blocks * kBlock, b0 = rem % b_blocks * kBlock;
    int64_t a1 = std::min(a0 + kBlock, a_dim.size), b1 = std::min(b0 + kBlock, b_dim.size);
    int64_t so, dof;
    offsets_of(o, others, &so, &dof);
    const T* sp = s + so;
    T* dp = d + dof;
    for (int64_t a = a0; a < a1; ++a) {
      const T* srow = sp + a;
      T* drow = dp + a * ad;
      for (int64_t b = b0; b < b1; ++b) drow[b] = srow[b * bs];
    }
  }
}

template <class T>
void copy_typed(const T* s, T* d, const std::vector<Dim>& dims, int64_t numel) {
  const Dim& in = dims.back();
  if (in.dst == 1 && in.src != 1 && in.src != 0 && dims.size() > 1) {
    for (size_t k = 0; k + 1 < dims.size(); ++k) {
      if (dims[k].src == 1) return copy_transposed(s, d, dims, int(k), numel);
    }
  }
  std::vector<Dim> outer(dims.begin(), dims.end() - 1);
  const int64_t n = in.size, ss = in.src, ds = in.dst;
  const int64_t rows = numel / n;
#pragma omp parallel for schedule(static) if (numel > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t so, dof;
    offsets_of(r, outer, &so, &dof);
    const T* sp = s + so;
    T* dp = d + dof;
    if (ss == 1 && ds == 1) {
      std::memcpy(dp, sp, size_t(n) * sizeof(T));
    } else if (ss == 0) {
      T v = *sp;
      for (int64_t i = 0; i < n; ++i) dp[i * ds] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) dp[i * ds] = sp[i * ss];
    }
  }
}

}  // namespace

void strided_copy(const Tensor& src, Tensor& dst) {
  if (src.shape() != dst.shape() || src.dtype() != dst.dtype()) {
    throw ShapeError("strided_copy: " + describe(src) + " into " + describe(dst));
  }
  const int64_t numel = dst.numel();
  if (numel == 0) return;
  if (src.strides() == dst.strides() && dst.is_dense()) {
    std::memcpy(dst.raw_data(), src.raw_data(), dst.nbytes());
    return;
  }
  std::vector<Dim> dims = coalesce(src, dst);
  const void* s = src.raw_data();
  void* d = dst.raw_data();
  switch (dtype_size(dst.dtype())) {
    case 1:
      return copy_typed(static_cast<const uint8_t*>(s), static_cast<uint8_t*>(d), dims, numel);
    case 2:
      return copy_typed(static_cast<const uint16_t*>(s), static_cast<uint16_t*>(d), dims, numel);
    case 4:
      return copy_typed(static_cast<const uint32_t*>(s), static_cast<uint32_t*>(d), dims, numel);
    case 8:
      return copy_typed(static_cast<const uint64_t*>(s), static_cast<uint64_t*>(d), dims, numel);
  }
  throw Error("strided_copy: unsupported element size");
}

}  // namespace kiln
