// `kiln convert` converters: IDX files and image folders, read back through the reader and the
// pipeline, and in the same order as the pipeline's own sources.
#include "kiln/data/record_converters.h"

#include <sys/stat.h>
#include <zlib.h>

#include <gtest/gtest.h>

#include "kiln/data/dataset.h"
#include "kiln/data/record_dataset.h"
#include "kiln/data/vision.h"
#include "kiln/record/record_reader.h"
#include "kiln/record/verify.h"
#include "record/record_test_util.h"

namespace kiln::record::record_convert_test {
namespace {
using testing::ScratchDir;

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_TRUE(f);
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  gzclose(f);
}

// n images of h x w whose pixel (y, x) of image i is i + 3y + x; label i % 10.
void write_idx_pair(const std::string& images, const std::string& labels, uint32_t n, uint32_t h,
                    uint32_t w) {
  std::vector<uint8_t> img, lab;
  put_be32(img, 0x803);
  put_be32(img, n);
  put_be32(img, h);
  put_be32(img, w);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t y = 0; y < h; ++y)
      for (uint32_t x = 0; x < w; ++x) img.push_back(uint8_t(i + 3 * y + x));
  put_be32(lab, 0x801);
  put_be32(lab, n);
  for (uint32_t i = 0; i < n; ++i) lab.push_back(uint8_t(i % 10));
  write_gz(images, img);
  testing::write_file(labels, lab);  // plain, not gzipped: both must work
}

TEST(RecordConvert, IdxRawPixelsRoundTrip) {
  ScratchDir dir;
  write_idx_pair(dir / "img.gz", dir / "lab", 25, 4, 5);
  std::vector<ConvertProgress> updates;
  auto result = convert_idx(
      dir / "img.gz", dir / "lab", dir / "out",
      {.shards = 2, .progress = [&](const ConvertProgress& p) { updates.push_back(p); }});
  EXPECT_EQ(result.rows, 25u);
  ASSERT_FALSE(updates.empty());
  EXPECT_EQ(updates.back().rows_done, 25u);
  EXPECT_EQ(updates.back().rows_total, 25u);
  RecordReader reader(dir / "out0");
  ASSERT_EQ(reader.num_rows(), 25u);
  EXPECT_EQ(reader.schema()[1].shape, (std::vector<int64_t>{4, 5}));
  for (uint64_t i = 0; i < 25; ++i) {
    auto v = reader.read(i);
    EXPECT_EQ(v[0].as_int(), int64_t(i % 10));
    EXPECT_EQ(v[1].shape(), (std::vector<int64_t>{4, 5}));
    for (uint64_t y = 0; y < 4; ++y)
      for (uint64_t x = 0; x < 5; ++x) EXPECT_EQ(v[1].data[y * 5 + x], uint8_t(i + 3 * y + x));
  }
  EXPECT_EQ(reader.find("label", 3), (std::vector<uint64_t>{3, 13, 23}));
}

TEST(RecordConvert, IdxAsPngDecodesToTheSamePixels) {
  ScratchDir dir;
  write_idx_pair(dir / "img.gz", dir / "lab", 6, 7, 3);
  convert_idx(dir / "img.gz", dir / "lab", dir / "png", {.png = true});
  RecordReader reader(dir / "png");
  EXPECT_EQ(reader.schema()[1].type, FieldType::bytes);
  for (uint64_t i = 0; i < 6; ++i) {
    auto v = reader.read(i);
    Tensor img = data::vision::decode_image(v[1].data.data(), v[1].data.size(), false);
    auto px = img.to_vector<uint8_t>();
    ASSERT_EQ(px.size(), 21u);
    for (uint64_t y = 0; y < 7; ++y)
      for (uint64_t x = 0; x < 3; ++x) EXPECT_EQ(px[y * 3 + x], uint8_t(i + 3 * y + x));
  }
}

TEST(RecordConvert, IdxErrorsNameTheFile) {
  ScratchDir dir;
  write_idx_pair(dir / "img.gz", dir / "lab", 5, 2, 2);
  write_idx_pair(dir / "img6.gz", dir / "lab6", 6, 2, 2);
  try {
    convert_idx(dir / "img.gz", dir / "lab6", dir / "x");
    FAIL();
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "lab6"), std::string::npos) << e.what();
  }
  EXPECT_THROW(convert_idx(dir / "lab", dir / "lab", dir / "x"), FileError);
  EXPECT_FALSE(testing::file_exists(dir / "x"));
}

TEST(RecordConvert, ImageFolderMatchesImageFolderDataset) {
  ScratchDir dir;
  std::string root = dir / "images";
  ::mkdir(root.c_str(), 0755);
  std::vector<std::string> classes = {"zebra", "ant", "cat"};  // labels by sorted name
  int made = 0;
  for (const auto& c : classes) {
    ::mkdir((root + "/" + c).c_str(), 0755);
    for (int i = 0; i < 3 + int(c.size() % 2); ++i) {
      Tensor img = Tensor::empty(Shape{2 + i, 3, 3}, DType::u8);
      auto* p = img.data<uint8_t>();
      for (int64_t k = 0; k < img.numel(); ++k) p[k] = uint8_t(k * 7 + made);
      testing::write_file(root + "/" + c + "/img" + std::to_string(i) + ".PNG",
                          data::vision::encode_png(img));
      ++made;
    }
  }
  testing::write_file(root + "/ant/notes.txt", {'h', 'i'});  // not an image: skipped
  auto result = convert_image_folder(root, dir / "rec", {.shards = 3});
  EXPECT_EQ(result.rows, uint64_t(made));
  EXPECT_TRUE(verify_records(dir / "rec0").ok());

  RecordReader reader(dir / "rec2");
  EXPECT_EQ(reader.schema().str(),
            "  label: int32 (indexed)\n  image: bytes\n  file_name: string\n");
  EXPECT_EQ(reader.read(0)[2].as_string(), "ant/img0.PNG");

  // Same rows, same order, same labels as ImageFolderDataset reading the folder itself.
  auto folder = data::ImageFolderDataset(root, {.shuffle = false})
                    .create_tuple_iterator({.columns = {"image", "label"}, .num_epochs = 1});
  auto records =
      data::RecordDataset(dir / "rec0", {"image", "label"}, {.shuffle = data::RecordShuffle::none})
          .create_tuple_iterator({.num_epochs = 1});
  std::vector<Tensor> a, b;
  int rows = 0;
  while (folder.next(a)) {
    ASSERT_TRUE(records.next(b));
    EXPECT_EQ(a[0].to_vector<uint8_t>(), b[0].to_vector<uint8_t>()) << rows;
    EXPECT_EQ(a[1].item<int32_t>(), b[1].item<int32_t>()) << rows;
    ++rows;
  }
  EXPECT_FALSE(records.next(b));
  EXPECT_EQ(rows, made);
}

TEST(RecordConvert, ProgressLineShowsRateAndEta) {
  std::string line = format_progress({.rows_done = 1000, .rows_total = 3000, .seconds = 0.5});
  EXPECT_NE(line.find("1000/3000"), std::string::npos) << line;
  EXPECT_NE(line.find("2000 rows/s"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 1.0 s"), std::string::npos) << line;
}

}  // namespace
}  // namespace kiln::record::record_convert_test
