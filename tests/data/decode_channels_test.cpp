// One channel rule for a set of images: 1 when every image is grayscale, else 3 (alpha dropped).
// ImageFolderDataset's decode and `kiln data bench --decode` follow it; Decode takes a mode.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data_test_util.h"
#include "kiln/core/error.h"
#include "kiln/data/bench.h"
#include "kiln/data/vision.h"

namespace kiln::data::decode_channels_test {
namespace {

namespace fs = std::filesystem;

Tensor pixels(int64_t h, int64_t w, int64_t c, int seed) {
  Tensor t = Tensor::empty(Shape{h, w, c}, DType::u8);
  uint8_t* p = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = uint8_t((i * 37 + seed * 11) % 251);
  return t;
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// DIR/a, DIR/b with three images each; `colour_file` adds one RGB PNG to b.
fs::path image_folder(const std::string& name, bool colour_file) {
  fs::path dir = fs::temp_directory_path() /
                 ("kiln_decode_channels_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  for (const char* cls : {"a", "b"}) {
    fs::create_directories(dir / cls);
    for (int k = 0; k < 2; ++k) {
      write_bytes(dir / cls / ("g" + std::to_string(k) + ".png"),
                  vision::encode_png(pixels(6, 5, 1, k)));
    }
    write_bytes(dir / cls / "ga.png", vision::encode_png(pixels(6, 5, 2, 7)));  // gray + alpha
    write_bytes(dir / cls / "j.jpg", vision::encode_jpeg(pixels(6, 5, 1, 3)));  // 1 component
  }
  if (colour_file) write_bytes(dir / "b" / "z_rgb.png", vision::encode_png(pixels(6, 5, 3, 9)));
  return dir;
}

std::vector<int64_t> channels_of_rows(const Dataset& ds) {
  std::vector<int64_t> out;
  auto it = ds.create_tuple_iterator();
  std::vector<Tensor> row;
  while (it.next(row)) out.push_back(row[0].dim(row[0].rank() - 1));
  return out;
}

TEST(DecodeChannels, HeaderGivesTheFilesOwnChannels) {
  auto png_gray = vision::encode_png(pixels(4, 4, 1, 0));
  auto png_gray_alpha = vision::encode_png(pixels(4, 4, 2, 0));
  auto png_rgba = vision::encode_png(pixels(4, 4, 4, 0));
  auto jpg_gray = vision::encode_jpeg(pixels(4, 4, 1, 0));
  auto jpg_rgb = vision::encode_jpeg(pixels(4, 4, 3, 0));
  EXPECT_EQ(vision::encoded_image_channels(png_gray.data(), png_gray.size()), 1);
  EXPECT_EQ(vision::encoded_image_channels(png_gray_alpha.data(), png_gray_alpha.size()), 1);
  EXPECT_EQ(vision::encoded_image_channels(png_rgba.data(), png_rgba.size()), 3);
  EXPECT_EQ(vision::encoded_image_channels(jpg_gray.data(), jpg_gray.size()), 1);
  EXPECT_EQ(vision::encoded_image_channels(jpg_rgb.data(), jpg_rgb.size()), 3);
  EXPECT_EQ(vision::encoded_image_channels(jpg_rgb.data(), 8), 0);  // header cut off
  // The header agrees with what ColorMode::file decodes, and no mode yields alpha.
  for (const auto* bytes : {&png_gray, &png_gray_alpha, &png_rgba, &jpg_gray, &jpg_rgb}) {
    const int64_t c = vision::encoded_image_channels(bytes->data(), bytes->size());
    EXPECT_EQ(vision::decode_image(bytes->data(), bytes->size(), vision::ColorMode::file).dim(2),
              c);
    EXPECT_EQ(vision::decode_image(bytes->data(), bytes->size(), vision::ColorMode::gray).dim(2),
              1);
    EXPECT_EQ(vision::decode_image(bytes->data(), bytes->size(), vision::ColorMode::rgb).dim(2), 3);
  }
  // gray of a colour image is its luma: a gray colour stays that gray.
  Tensor flat = Tensor::full(Shape{3, 3, 3}, 90, DType::u8);
  auto flat_png = vision::encode_png(flat);
  Tensor luma = vision::decode_image(flat_png.data(), flat_png.size(), vision::ColorMode::gray);
  for (uint8_t v : luma.to_vector<uint8_t>()) EXPECT_NEAR(int(v), 90, 1);
  EXPECT_THROW(vision::color_mode_for_channels(2, "test"), Error);
}

TEST(DecodeChannels, GrayscaleFolderDecodesToOneChannel) {
  fs::path dir = image_folder("gray", /*colour_file=*/false);
  EXPECT_EQ(image_folder_channels(dir.string()), 1);
  EXPECT_EQ(channels_of_rows(ImageFolderDataset(dir.string(), {.decode = true})),
            std::vector<int64_t>(8, 1));
  // Forced to RGB.
  EXPECT_EQ(channels_of_rows(ImageFolderDataset(dir.string(), {.decode = true, .channels = 3})),
            std::vector<int64_t>(8, 3));
  // `kiln data bench --decode` batches what the API decodes: [B, H, W, 1].
  BenchOptions o;
  o.source = "imagefolder:" + dir.string();
  o.decode = true;
  o.batch_size = 4;
  EXPECT_EQ(bench_decode_channels(o), 1);
  EXPECT_EQ(channels_of_rows(build_bench_pipeline(o)), (std::vector<int64_t>{1, 1}));
  o.channels = 3;
  EXPECT_EQ(channels_of_rows(build_bench_pipeline(o)), (std::vector<int64_t>{3, 3}));
  fs::remove_all(dir);
}

TEST(DecodeChannels, MixedFolderDecodesToRgb) {
  fs::path dir = image_folder("mixed", /*colour_file=*/true);
  EXPECT_EQ(image_folder_channels(dir.string()), 3);
  EXPECT_EQ(channels_of_rows(ImageFolderDataset(dir.string(), {.decode = true})),
            std::vector<int64_t>(9, 3));
  EXPECT_EQ(channels_of_rows(ImageFolderDataset(dir.string(), {.decode = true, .channels = 1})),
            std::vector<int64_t>(9, 1));
  // The folders a class_indexing leaves out do not count.
  EXPECT_EQ(image_folder_channels(dir.string(), {.class_indexing = {{"a", 0}}}), 1);
  BenchOptions o;
  o.source = "imagefolder:" + dir.string();
  o.transforms = {"decode"};
  o.batch_size = 3;
  EXPECT_EQ(channels_of_rows(build_bench_pipeline(o)), (std::vector<int64_t>{3, 3, 3}));
  // A file that is no image is named.
  write_bytes(dir / "a" / "broken.png", {1, 2, 3});
  try {
    image_folder_channels(dir.string());
    FAIL() << "expected an error";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.png"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::data::decode_channels_test
