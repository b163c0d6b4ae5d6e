#include "kiln/ops/dnnl/blocked_copy.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace kiln::ops::dnnl_util {

std::optional<BlockedCopy> BlockedCopy::between(const dnnl::memory::desc& plain,
                                                const dnnl::memory::desc& blocked) {
  const dnnl_memory_desc_t& from = plain.data;
  const dnnl_memory_desc_t& md = blocked.data;
  const int rank = md.ndims;
  const int element_bytes = int(dnnl::memory::data_type_size(blocked.data_type()));
  if (md.format_kind != dnnl_blocked || from.format_kind != dnnl_blocked || md.extra.flags != 0 ||
      from.extra.flags != 0 || from.format_desc.blocking.inner_nblks != 0 || rank < 1 ||
      from.ndims != rank || from.data_type != md.data_type || from.offset0 != 0 ||
      (element_bytes != 2 && element_bytes != 4)) {
    return std::nullopt;
  }
  const dnnl_blocking_desc_t& blocking = md.format_desc.blocking;
  int64_t elements = 1;
  for (int d = 0; d < rank; ++d) elements *= md.dims[d];
  if (elements > kMaxElements) return std::nullopt;
  BlockedCopy c;
  c.element_bytes_ = element_bytes;
  c.blocked_elements_ = int64_t(blocked.get_size()) / element_bytes;
  for (int d = 0; d < rank; ++d) {
    if (md.dims[d] != from.dims[d] || from.padded_dims[d] != from.dims[d] ||
        md.padded_offsets[d] != 0) {
      return std::nullopt;
    }
    c.padded_ = c.padded_ || md.padded_dims[d] != md.dims[d];
    c.dims_.push_back(md.dims[d]);
    c.plain_strides_.push_back(from.format_desc.blocking.strides[d]);
  }
  // An inner block's stride is the product of the inner blocks after it (innermost fastest).
  std::vector<int64_t> inner_stride(size_t(blocking.inner_nblks), 1);
  for (int k = blocking.inner_nblks - 2; k >= 0; --k) {
    inner_stride[size_t(k)] = inner_stride[size_t(k) + 1] * blocking.inner_blks[k + 1];
  }
  for (int d = 0; d < rank; ++d) {
    int64_t blocked_size = 1;  // how many of d's indices its inner blocks cover together
    for (int k = 0; k < blocking.inner_nblks; ++k) {
      if (blocking.inner_idxs[k] == d) blocked_size *= blocking.inner_blks[k];
    }
    std::vector<int64_t>& table = c.blocked_offset_.emplace_back(size_t(c.dims_[size_t(d)]));
    for (int64_t i = 0; i < c.dims_[size_t(d)]; ++i) {
      int64_t offset = (i / blocked_size) * blocking.strides[d];
      int64_t covered = blocked_size;  // the index's remainder splits over d's blocks, outer first
      for (int k = 0; k < blocking.inner_nblks; ++k) {
        if (blocking.inner_idxs[k] != d) continue;
        covered /= blocking.inner_blks[k];
        offset += (i / covered) % blocking.inner_blks[k] * inner_stride[size_t(k)];
      }
      table[size_t(i)] = offset + (d == 0 ? md.offset0 : 0);
    }
  }
  // Loop order: the inner loop runs along the dimension of the innermost block, whose
  // consecutive elements are adjacent in the blocked layout; the outer loops go from the
  // outermost dimension in memory inward.
  c.order_.resize(static_cast<size_t>(rank));
  std::iota(c.order_.begin(), c.order_.end(), 0);
  std::stable_sort(c.order_.begin(), c.order_.end(),
                   [&](int a, int b) { return blocking.strides[a] > blocking.strides[b]; });
  if (blocking.inner_nblks > 0) {
    const int innermost = blocking.inner_idxs[blocking.inner_nblks - 1];
    std::erase(c.order_, innermost);
    c.order_.push_back(innermost);
  }
  return c;
}

template <typename Element, bool kToBlocked>
void BlockedCopy::copy(const Element* from, Element* to) const {
  const int rank = int(order_.size());
  int64_t rows = 1;  // runs of the inner loop
  for (int k = 0; k + 1 < rank; ++k) rows *= dims_[size_t(order_[size_t(k)])];
  const size_t last = size_t(order_.back());
  const int64_t inner = dims_[last];
  const int64_t inner_stride = plain_strides_[last];
  const int64_t* inner_offset = blocked_offset_[last].data();
  for (int64_t row = 0; row < rows; ++row) {
    int64_t plain = 0, blocked = 0, rest = row;
    for (int k = rank - 2; k >= 0; --k) {
      const size_t d = size_t(order_[size_t(k)]);
      const int64_t i = rest % dims_[d];
      rest /= dims_[d];
      plain += i * plain_strides_[d];
      blocked += blocked_offset_[d][size_t(i)];
    }
    for (int64_t i = 0; i < inner; ++i) {
      if constexpr (kToBlocked) {
        to[blocked + inner_offset[i]] = from[plain + i * inner_stride];
      } else {
        to[plain + i * inner_stride] = from[blocked + inner_offset[i]];
      }
    }
  }
}

void BlockedCopy::to_blocked(const void* plain, void* blocked) const {
  if (padded_) std::memset(blocked, 0, size_t(blocked_elements_ * element_bytes_));
  if (element_bytes_ == 4) {
    copy<uint32_t, true>(static_cast<const uint32_t*>(plain), static_cast<uint32_t*>(blocked));
  } else {
    copy<uint16_t, true>(static_cast<const uint16_t*>(plain), static_cast<uint16_t*>(blocked));
  }
}

void BlockedCopy::to_plain(const void* blocked, void* plain) const {
  if (element_bytes_ == 4) {
    copy<uint32_t, false>(static_cast<const uint32_t*>(blocked), static_cast<uint32_t*>(plain));
  } else {
    copy<uint16_t, false>(static_cast<const uint16_t*>(blocked), static_cast<uint16_t*>(plain));
  }
}

}  // namespace kiln::ops::dnnl_util
