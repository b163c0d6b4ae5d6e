// JPEG (libjpeg-turbo) and PNG (libpng) decoding into u8 HWC tensors, and encoders for tests and
// benchmark data.
#include <png.h>
#include <setjmp.h>
#include <stdio.h>

#include <jpeglib.h>
// jerror.h after jpeglib.h, which it needs.
#include <jerror.h>

#include <cstring>

#include "kiln/core/error.h"
#include "kiln/data/vision.h"

namespace kiln::data::vision {
namespace {

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

void jpeg_silence(j_common_ptr, int) {}

// A decoded image larger than this is refused before its memory is allocated: headers can claim
// up to 65500 x 65500 (JPEG) or 10^6 x 10^6 (PNG) pixels in a few bytes.
constexpr int64_t kMaxDecodedBytes = int64_t(1) << 30;
// libjpeg's own memory for one image. A file of several scans (progressive, or one scan per
// component) keeps every DCT coefficient of the image until its last scan, 2 bytes per pixel of
// each component, allocated and zeroed in jpeg_start_decompress: 512 MiB is a 4:2:0 progressive
// photo of 170 megapixels.
constexpr long kMaxJpegWorkingBytes = 512L << 20;

// Receives the output buffer once the header is known. Lives outside the setjmp frame, so a
// longjmp skips no C++ destructors.
struct JpegSink {
  Tensor image;
  unsigned char* alloc(int64_t h, int64_t w, int64_t c) {
    if (h * w * c > kMaxDecodedBytes) return nullptr;
    image = Tensor::empty(Shape{h, w, c}, DType::u8);
    return static_cast<unsigned char*>(image.raw_data());
  }
};

unsigned char* sink_alloc(void* sink, int64_t h, int64_t w, int64_t c) {
  return static_cast<JpegSink*>(sink)->alloc(h, w, c);
}

// Only trivially destructible locals between setjmp and any longjmp.
bool decode_jpeg_c(const unsigned char* data, size_t size, ColorMode mode, void* sink,
                   char* message) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_silence;
  err.message[0] = 0;
  if (setjmp(err.jump)) {
    const int code = err.mgr.msg_code;
    if (code == JERR_NO_BACKING_STORE || code == JERR_OUT_OF_MEMORY) {
      std::snprintf(message, JMSG_LENGTH_MAX,
                    "%lld x %lld pixels in %d components need more than %ld bytes of decoder "
                    "memory (%s)",
                    (long long)cinfo.image_height, (long long)cinfo.image_width,
                    cinfo.num_components, kMaxJpegWorkingBytes, err.message);
    } else {
      std::strncpy(message, err.message, JMSG_LENGTH_MAX - 1);
      message[JMSG_LENGTH_MAX - 1] = 0;
    }
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  cinfo.mem->max_memory_to_use = kMaxJpegWorkingBytes;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const bool gray_file = cinfo.jpeg_color_space == JCS_GRAYSCALE;
  cinfo.out_color_space =
      mode == ColorMode::gray || (mode == ColorMode::file && gray_file) ? JCS_GRAYSCALE : JCS_RGB;
  // The output's size, and its buffer, before libjpeg allocates its own for the image.
  jpeg_calc_output_dimensions(&cinfo);
  const int64_t h = cinfo.output_height, w = cinfo.output_width, c = cinfo.output_components;
  unsigned char* out = sink_alloc(sink, h, w, c);
  if (!out) {
    std::snprintf(message, JMSG_LENGTH_MAX, "%lld x %lld x %lld pixels are more than %lld bytes",
                  (long long)h, (long long)w, (long long)c, (long long)kMaxDecodedBytes);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_start_decompress(&cinfo);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW rows[1] = {out + size_t(cinfo.output_scanline) * size_t(w * c)};
    jpeg_read_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

Tensor decode_png(const unsigned char* data, size_t size, ColorMode mode) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, data, size)) {
    throw Error(std::string("PNG: ") + img.message);
  }
  // libpng drops alpha (composing on black) and converts colour to luma as asked.
  const bool gray =
      mode == ColorMode::gray || (mode == ColorMode::file && !(img.format & PNG_FORMAT_FLAG_COLOR));
  img.format = gray ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  const int64_t c = gray ? 1 : 3;
  if (int64_t(img.height) * int64_t(img.width) * c > kMaxDecodedBytes) {
    std::string dims =
        std::to_string(img.height) + " x " + std::to_string(img.width) + " x " + std::to_string(c);
    png_image_free(&img);
    throw Error("PNG: " + dims + " pixels are more than " + std::to_string(kMaxDecodedBytes) +
                " bytes");
  }
  Tensor out = Tensor::empty(Shape{int64_t(img.height), int64_t(img.width), c}, DType::u8);
  if (!png_image_finish_read(&img, nullptr, out.raw_data(), 0, nullptr)) {
    std::string msg = img.message;
    png_image_free(&img);
    throw Error("PNG: " + msg);
  }
  return out;
}

}  // namespace

ImageFormat detect_format(const uint8_t* data, size_t size) {
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageFormat::jpeg;
  static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (size >= 8 && std::memcmp(data, png_magic, 8) == 0) return ImageFormat::png;
  return ImageFormat::unknown;
}

Tensor decode_image(const uint8_t* data, size_t size, ColorMode mode) {
  switch (detect_format(data, size)) {
    case ImageFormat::jpeg: {
      JpegSink sink;
      char message[JMSG_LENGTH_MAX] = {0};
      if (!decode_jpeg_c(data, size, mode, &sink, message)) {
        throw Error(std::string("corrupt JPEG: ") + message);
      }
      return sink.image;
    }
    case ImageFormat::png:
      return decode_png(data, size, mode);
    case ImageFormat::unknown:
      break;
  }
  char head[64];
  std::snprintf(head, sizeof head, "%zu bytes starting %02x %02x %02x %02x", size,
                size > 0 ? data[0] : 0, size > 1 ? data[1] : 0, size > 2 ? data[2] : 0,
                size > 3 ? data[3] : 0);
  throw Error(std::string("not a JPEG or PNG image (") + head + ")");
}

int64_t encoded_image_channels(const uint8_t* data, size_t size) {
  switch (detect_format(data, size)) {
    case ImageFormat::png: {
      // IHDR comes first; its colour type is byte 25. Types 0 (gray) and 4 (gray + alpha) have no
      // colour; 2, 3 (palette) and 6 do, as libpng's simplified reader sees them.
      if (size < 26) return 0;
      const uint8_t type = data[25];
      return type == 0 || type == 4 ? 1 : 3;
    }
    case ImageFormat::jpeg: {
      // Marker segments up to the frame header (SOF0..SOF15 but DHT, JPG, DAC), whose component
      // count follows precision, height and width.
      size_t pos = 2;
      while (pos + 4 <= size) {
        if (data[pos] != 0xFF) return 0;
        const uint8_t marker = data[pos + 1];
        if (marker == 0xFF) {  // fill byte
          ++pos;
          continue;
        }
        const size_t length = size_t(data[pos + 2]) << 8 | data[pos + 3];
        const bool frame =
            marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
        if (frame) return pos + 9 < size ? (data[pos + 9] == 1 ? 1 : 3) : 0;
        if (marker == 0xD9 || marker == 0xDA || length < 2) return 0;
        pos += 2 + length;
      }
      return 0;
    }
    case ImageFormat::unknown:
      break;
  }
  throw Error("not a JPEG or PNG image");
}

ColorMode color_mode_for_channels(int64_t channels, const std::string& what) {
  if (channels == 1) return ColorMode::gray;
  if (channels == 3) return ColorMode::rgb;
  throw Error(what + ": channels must be 1 (gray) or 3 (RGB), got " + std::to_string(channels));
}

namespace {
void check_encodable(const Tensor& image, const char* what) {
  if (image.dtype() != DType::u8 || (image.rank() != 2 && image.rank() != 3) ||
      (image.rank() == 3 && image.dim(2) != 1 && image.dim(2) != 3 &&
       !(std::string(what) == "encode_png" && (image.dim(2) == 2 || image.dim(2) == 4)))) {
    throw ShapeError(std::string(what) + ": expected a u8 image [H, W] or [H, W, 1|3], got " +
                     describe(image));
  }
}
}  // namespace

std::vector<uint8_t> encode_png(const Tensor& image) {
  check_encodable(image, "encode_png");
  Tensor img = image.contiguous();
  png_image p;
  std::memset(&p, 0, sizeof p);
  p.version = PNG_IMAGE_VERSION;
  p.height = png_uint_32(img.dim(0));
  p.width = png_uint_32(img.dim(1));
  int64_t c = img.rank() == 3 ? img.dim(2) : 1;
  p.format = c == 1   ? PNG_FORMAT_GRAY
             : c == 2 ? PNG_FORMAT_GA
             : c == 3 ? PNG_FORMAT_RGB
                      : PNG_FORMAT_RGBA;
  png_alloc_size_t bytes = 0;
  if (!png_image_write_to_memory(&p, nullptr, &bytes, 0, img.raw_data(), 0, nullptr)) {
    throw Error(std::string("encode_png: ") + p.message);
  }
  std::vector<uint8_t> out(bytes);
  if (!png_image_write_to_memory(&p, out.data(), &bytes, 0, img.raw_data(), 0, nullptr)) {
    throw Error(std::string("encode_png: ") + p.message);
  }
  out.resize(bytes);
  return out;
}

std::vector<uint8_t> encode_jpeg(const Tensor& image, int quality) {
  check_encodable(image, "encode_jpeg");
  Tensor img = image.contiguous();
  const int64_t h = img.dim(0), w = img.dim(1), c = img.rank() == 3 ? img.dim(2) : 1;
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = JDIMENSION(w);
  cinfo.image_height = JDIMENSION(h);
  cinfo.input_components = int(c);
  cinfo.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  auto* px = static_cast<unsigned char*>(img.raw_data());
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row[1] = {px + size_t(cinfo.next_scanline) * size_t(w * c)};
    jpeg_write_scanlines(&cinfo, row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<uint8_t> out(buf, buf + size);
  jpeg_destroy_compress(&cinfo);
  std::free(buf);
  return out;
}

}  // namespace kiln::data::vision
