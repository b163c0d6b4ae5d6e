// Writes small PNG and JPEG images of the kinds Kiln encodes (gray and RGB, odd and even
// sizes) into a directory: the image decoder fuzzer's seeds (kept in fuzz/corpus/image).
//   image_seed_corpus OUT_DIR
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/data/vision.h"

using namespace kiln;

namespace {

Tensor image(int64_t h, int64_t w, int64_t c) {
  Tensor t = Tensor::empty(Shape{h, w, c}, DType::u8);
  uint8_t* p = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = uint8_t(i * 37 + 11);
  return t;
}

void write(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
    std::perror(path.c_str());
  if (f) std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  using data::vision::encode_jpeg;
  using data::vision::encode_png;
  write(dir + "/gray-5x3.png", encode_png(image(3, 5, 1)));
  write(dir + "/rgb-4x4.png", encode_png(image(4, 4, 3)));
  write(dir + "/gray-5x3.jpg", encode_jpeg(image(3, 5, 1), 90));
  write(dir + "/rgb-4x4.jpg", encode_jpeg(image(4, 4, 3), 50));
  write(dir + "/rgb-17x9.jpg", encode_jpeg(image(9, 17, 3), 95));
  return 0;
}
