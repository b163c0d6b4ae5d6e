#pragma once
// IDX files (the MNIST format), gzipped or plain: a 4-byte magic (0, 0, 0x08 for unsigned bytes,
// the rank), `rank` big-endian 32-bit dimensions, then the bytes in row-major order.
// The reader trusts nothing in the header: the dimensions' product is computed with overflow
// checks and compared with the bytes the file really holds before anything is allocated, so a
// hostile header gives a FileError naming the file, the field and its byte offset.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::data {

struct IdxArray {
  std::vector<int64_t> dims;
  Tensor data;  // u8, shape dims
};

// Reads an IDX file of unsigned bytes with `expected_rank` dimensions. FileError when the file
// is missing, not IDX, truncated, longer than its dimensions say, or its dimensions overflow.
IdxArray read_idx(const std::string& path, uint32_t expected_rank);

}  // namespace kiln::data
