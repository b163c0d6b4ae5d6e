#pragma once
// Copies a plain (strided) tensor into one of oneDNN's blocked layouts and back, for weights:
// a convolution wants its weights blocked (Acdb16a, ABcd16b16a, ...) and they change every step.
//
// Why not oneDNN's reorder primitive: creating the first one walks its long list of
// implementations and leaves about 0.7 MiB of libdnnl's code resident (measured on oneDNN 2.6
// after a matmul and a convolution were already built), more than LeNet's whole memory plan,
// to permute 2,400 floats. A blocked layout's offset is a sum of one term per dimension, so
// four small tables built once make the copy one gather per element. That is as fast as
// oneDNN's jit reorder for small weights (LeNet's 16x6x5x5: 1.8 µs against 2.2) but not for
// larger ones (32x32x3x3: 6.6 µs against 3.2), so those stay with the reorder primitive: a
// network that has them has a memory plan of megabytes, and the code's 0.7 MiB matters less.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::ops::dnnl_util {

class BlockedCopy {
 public:
  // Above this many elements a reorder primitive is faster.
  static constexpr int64_t kMaxElements = 4096;

  // The copy between the same data in a plain strided layout and in a blocked one; nullopt
  // unless `plain` has no inner blocks, both describe the same dims, at most kMaxElements of a
  // 2- or 4-byte dtype, and `blocked` is a blocked layout without extra flags (else use a
  // reorder primitive, which also converts dtypes).
  static std::optional<BlockedCopy> between(const dnnl::memory::desc& plain,
                                            const dnnl::memory::desc& blocked);

  // Writes every element of `blocked` (the padding with zeros).
  void to_blocked(const void* plain, void* blocked) const;
  // Reads the logical elements of `blocked` back into the strided tensor.
  void to_plain(const void* blocked, void* plain) const;

 private:
  BlockedCopy() = default;
  template <typename Element, bool kToBlocked>
  void copy(const Element* from, Element* to) const;

  // Per dimension:
  std::vector<int64_t> dims_;
  std::vector<int64_t> plain_strides_;
  // Per dimension, per index: that index's share of the element's offset in the blocked layout.
  std::vector<std::vector<int64_t>> blocked_offset_;
  // The dimensions from the outermost loop to the innermost.
  std::vector<int> order_;
  int64_t blocked_elements_ = 0;  // padding included
  bool padded_ = false;
  int element_bytes_ = 4;
};

}  // namespace kiln::ops::dnnl_util
