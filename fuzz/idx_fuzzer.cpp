// libFuzzer target for the IDX (MNIST-format) reader, gzipped or plain: any bytes must give an
// array or a kiln::FileError, never a crash, an out-of-bounds access (ASan), undefined behaviour
// (UBSan) or an allocation the file's real size does not justify (-malloc_limit_mb).
#include <cstdint>

#include "fuzz/fuzz_file.h"
#include "kiln/core/error.h"
#include "kiln/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzFile file(data, size);
  // The rank the caller expects: what the magic says (so the dimensions get explored), or 1.
  uint32_t rank = size >= 4 && data[3] >= 1 && data[3] <= 4 ? data[3] : 1;
  try {
    kiln::data::IdxArray a = kiln::data::read_idx(file.path(), rank);
    int64_t n = 1;
    for (int64_t d : a.dims) n *= d;
    if (n != a.data.numel()) __builtin_trap();
  } catch (const kiln::FileError&) {
  }
  return 0;
}
