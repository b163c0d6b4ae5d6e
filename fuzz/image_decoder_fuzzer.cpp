// libFuzzer target for the image decoders as Kiln calls them (Decode, ImageFolderDataset):
// decode_image on PNG, JPEG or anything else must give an image tensor or a kiln::Error, never a
// crash, an out-of-bounds access or a huge allocation.
#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/data/vision.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (bool rgb : {false, true}) {
    try {
      kiln::Tensor image = kiln::data::vision::decode_image(data, size, rgb);
      if (image.rank() != 3 || (rgb && image.dim(2) != 3)) __builtin_trap();
    } catch (const kiln::Error&) {
    }
  }
  return 0;
}
