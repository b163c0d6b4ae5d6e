// The image decoders on hostile headers: sizes a few bytes can claim (65500 x 65500 JPEG,
// 10^6 x 10^6 PNG) are refused before the image or the decoder's own buffers are allocated;
// damaged data is a kiln::Error.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "kiln/core/error.h"
#include "kiln/data/vision.h"
#include "testing/file_contents.h"

namespace kiln::data::vision::codec_limits_test {
namespace {

std::string error_of(const std::vector<uint8_t>& bytes, bool rgb = false) {
  try {
    decode_image(bytes.data(), bytes.size(), rgb);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void put_be32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = uint8_t(v >> (24 - 8 * i));
}

// Rewrites the height and width in a JPEG's SOF0 header (FF C0: length (2), precision (1),
// height (2), width (2)); false when the file has no SOF0.
bool set_jpeg_dimensions(std::vector<uint8_t>& jpg, uint16_t height, uint16_t width) {
  for (size_t i = 0; i + 8 < jpg.size(); ++i) {
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) {
      jpg[i + 5] = uint8_t(height >> 8);
      jpg[i + 6] = uint8_t(height);
      jpg[i + 7] = uint8_t(width >> 8);
      jpg[i + 8] = uint8_t(width);
      return true;
    }
  }
  return false;
}

TEST(CodecLimits, PngClaimingHugeDimensionsIsRefusedBeforeAllocating) {
  Tensor img = Tensor::zeros(Shape{2, 3, 3}, DType::u8);
  std::vector<uint8_t> png = encode_png(img);
  // IHDR's width and height sit at bytes 16 and 20; its CRC follows the 13 data bytes.
  put_be32(png, 16, 1000000);
  put_be32(png, 20, 1000000);
  uLong crc = crc32(0, png.data() + 12, 17);
  put_be32(png, 29, uint32_t(crc));
  std::string m = error_of(png, /*rgb=*/true);
  EXPECT_NE(m.find("1000000 x 1000000 x 3 pixels are more than 1073741824 bytes"),
            std::string::npos)
      << m;
}

TEST(CodecLimits, JpegClaimingHugeDimensionsIsRefusedBeforeAllocating) {
  Tensor img = Tensor::zeros(Shape{8, 8, 3}, DType::u8);
  std::vector<uint8_t> jpg = encode_jpeg(img, 90);
  ASSERT_TRUE(set_jpeg_dimensions(jpg, 65280, 65280));
  std::string m = error_of(jpg);
  EXPECT_NE(m.find("corrupt JPEG: 65280 x 65280 x 3 pixels are more than"), std::string::npos) << m;
}

// A JPEG the image fuzzer found: a baseline frame of 65496 x 65363 pixels whose scan holds fewer
// components than the frame, so libjpeg keeps the whole image's coefficients (12.8 GB, zeroed
// in jpeg_start_decompress, which ran before the size was checked).
std::vector<uint8_t> multi_scan_jpeg() {
  const std::string path =
      std::string(KILN_SOURCE_DIR) + "/fuzz/corpus/image/multiscan-65496x65363.jpg";
  return kiln::testing::file_bytes(path);
}

TEST(CodecLimits, MultiScanJpegClaimingHugeDimensionsIsRefusedBeforeLibjpegAllocates) {
  const std::vector<uint8_t> jpg = multi_scan_jpeg();
  ASSERT_GT(jpg.size(), 600u);
  std::string m = error_of(jpg, /*rgb=*/true);
  EXPECT_NE(m.find("corrupt JPEG: 65496 x 65363 x 3 pixels are more than 1073741824 bytes"),
            std::string::npos)
      << m;
}

TEST(CodecLimits, MultiScanJpegNeedingTooMuchDecoderMemoryIsRefused) {
  // The same file as 16000 x 16000: its 768 MB of output pass the output's limit, but its
  // coefficients (2 bytes for each of 1.5 samples per pixel) are more than libjpeg may hold.
  std::vector<uint8_t> jpg = multi_scan_jpeg();
  ASSERT_GT(jpg.size(), 600u);
  ASSERT_TRUE(set_jpeg_dimensions(jpg, 16000, 16000));
  std::string m = error_of(jpg, /*rgb=*/true);
  EXPECT_NE(m.find("corrupt JPEG: 16000 x 16000 pixels in 3 components need more than 536870912 "
                   "bytes of decoder memory"),
            std::string::npos)
      << m;
}

TEST(CodecLimits, TruncatedAndGarbageImagesAreErrors) {
  Tensor img = Tensor::zeros(Shape{4, 4, 3}, DType::u8);
  for (auto bytes : {encode_png(img), encode_jpeg(img, 90)}) {
    for (size_t cut : {size_t(3), size_t(9), bytes.size() / 2}) {
      std::vector<uint8_t> part(bytes.begin(), bytes.begin() + int64_t(cut));
      try {
        Tensor t = decode_image(part.data(), part.size(), true);
        // libjpeg fills a truncated scan with gray and warns; the shape is still the header's.
        EXPECT_EQ(t.shape(), (Shape{4, 4, 3}));
      } catch (const Error&) {
      }
    }
  }
  EXPECT_NE(
      error_of({1, 2, 3, 4, 5}).find("not a JPEG or PNG image (5 bytes starting 01 02 03 04)"),
      std::string::npos);
}

}  // namespace
}  // namespace kiln::data::vision::codec_limits_test
