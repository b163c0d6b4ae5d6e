// Sources: MNIST IDX files (gzipped or not), image folders, in-memory slices.
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "data_test_util.h"
#include "kiln/core/error.h"
#include "kiln/data/vision.h"
#include "testing/file_contents.h"

namespace kiln::data::sources_test {
namespace {

namespace fs = std::filesystem;
using testing::run_values;

fs::path temp_dir(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("kiln_data_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::vector<uint8_t> idx_bytes(const std::vector<int64_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, 0x08, uint8_t(dims.size())};
  for (int64_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t((d >> s) & 0xff));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_file(const fs::path& p, const std::vector<uint8_t>& bytes, bool gz) {
  if (gz) {
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
}

// 5 train and 3 test images of 2x2 pixels; image i has pixel value 10 * i, label i % 10.
void write_mnist(const fs::path& dir, bool gz) {
  auto split = [&](const std::string& prefix, int n, int base) {
    std::vector<uint8_t> px, lb;
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < 4; ++k) px.push_back(uint8_t(10 * (base + i)));
      lb.push_back(uint8_t((base + i) % 10));
    }
    std::string ext = gz ? ".gz" : "";
    write_file(dir / (prefix + "-images-idx3-ubyte" + ext), idx_bytes({n, 2, 2}, px), gz);
    write_file(dir / (prefix + "-labels-idx1-ubyte" + ext), idx_bytes({n}, lb), gz);
  };
  split("train", 5, 0);
  split("t10k", 3, 5);
}

TEST(Sources, MnistIdxGzippedOrPlainWithUsage) {
  for (bool gz : {true, false}) {
    fs::path dir = temp_dir(gz ? "mnist_gz" : "mnist_raw");
    write_mnist(dir, gz);
    MnistDataset train(dir.string(), {.usage = "train", .shuffle = false});
    EXPECT_EQ(train.get_dataset_size(), 5);
    EXPECT_EQ(train.get_col_names(), (std::vector<std::string>{"image", "label"}));
    auto it = train.create_tuple_iterator({.num_epochs = 1});
    std::vector<Tensor> row;
    ASSERT_TRUE(it.next(row));
    ASSERT_TRUE(it.next(row));
    EXPECT_EQ(row[0].shape(), (Shape{2, 2, 1}));
    EXPECT_EQ(row[0].dtype(), DType::u8);
    EXPECT_EQ(row[0].to_vector<uint8_t>(), (std::vector<uint8_t>{10, 10, 10, 10}));
    EXPECT_EQ(row[1].dtype(), DType::i32);
    EXPECT_EQ(row[1].item<int32_t>(), 1);
    EXPECT_EQ(MnistDataset(dir.string(), {.usage = "test"}).get_dataset_size(), 3);
    MnistDataset all(dir.string(), {.usage = "all", .shuffle = false});
    EXPECT_EQ(run_values(all, 1), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    fs::remove_all(dir);
  }
  EXPECT_THROW(MnistDataset("/tmp", {.usage = "validation"}), Error);
}

TEST(Sources, TruncatedIdxNamesFileAndOffset) {
  fs::path dir = temp_dir("mnist_trunc");
  write_mnist(dir, true);
  std::vector<uint8_t> px(4 * 5 - 3, 1);  // 3 bytes short
  write_file(dir / "train-images-idx3-ubyte.gz", idx_bytes({5, 2, 2}, px), true);
  try {
    MnistDataset(dir.string(), {.usage = "train"});
    FAIL() << "expected a FileError";
  } catch (const FileError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("train-images-idx3-ubyte.gz"), std::string::npos) << m;
    EXPECT_NE(m.find("truncated"), std::string::npos) << m;
    EXPECT_NE(m.find("offset 16"), std::string::npos) << m;
    EXPECT_NE(m.find("ends at 33"), std::string::npos) << m;
  }
  // A gzip stream cut in the middle.
  std::vector<uint8_t> whole = kiln::testing::file_bytes(dir / "t10k-images-idx3-ubyte.gz");
  whole.resize(whole.size() / 2);
  write_file(dir / "t10k-images-idx3-ubyte.gz", whole, false);
  EXPECT_THROW(MnistDataset(dir.string(), {.usage = "test"}), FileError);
  fs::remove_all(dir);
}

TEST(Sources, MissingFashionMnistSaysHowToGetIt) {
  try {
    FashionMnistDataset("/nonexistent/dir");
    FAIL() << "expected a FileError";
  } catch (const FileError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("apt-get install dataset-fashion-mnist"), std::string::npos) << m;
    EXPECT_NE(m.find("/nonexistent/dir"), std::string::npos) << m;
  }
}

TEST(Sources, DebianFashionMnist) {
  if (!fs::exists(std::string(kDebianFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  FashionMnistDataset train("", {.usage = "train"});
  EXPECT_EQ(train.get_dataset_size(), 60000);
  FashionMnistDataset test("", {.usage = "test", .shuffle = false});
  EXPECT_EQ(test.get_dataset_size(), 10000);
  auto it = test.take(3).create_tuple_iterator();
  std::vector<Tensor> row;
  ASSERT_TRUE(it.next(row));
  EXPECT_EQ(row[0].shape(), (Shape{28, 28, 1}));
  EXPECT_EQ(row[1].item<int32_t>(), 9);  // the first test image is an ankle boot
}

TEST(Sources, ImageFolderBytesOrDecoded) {
  fs::path dir = temp_dir("folder");
  // Two classes; "cat" has a PNG and a JPEG, "dog" a PNG; a text file is ignored.
  fs::create_directories(dir / "cat");
  fs::create_directories(dir / "dog");
  Tensor img = Tensor::full(Shape{4, 6, 3}, 77, DType::u8);
  write_file(dir / "cat" / "a.png", vision::encode_png(img), false);
  write_file(dir / "cat" / "b.JPG", vision::encode_jpeg(img, 95), false);
  write_file(dir / "dog" / "c.png", vision::encode_png(img), false);
  write_file(dir / "dog" / "notes.txt", {1, 2, 3}, false);
  ImageFolderDataset raw(dir.string(), {.shuffle = false});
  EXPECT_EQ(raw.get_dataset_size(), 3);
  EXPECT_EQ(run_values(raw, 1), (std::vector<int64_t>{0, 0, 1}));
  auto it = raw.create_tuple_iterator();
  std::vector<Tensor> row;
  ASSERT_TRUE(it.next(row));
  EXPECT_EQ(row[0].rank(), 1);  // encoded bytes
  EXPECT_EQ(vision::detect_format(row[0].data<uint8_t>(), size_t(row[0].numel())),
            vision::ImageFormat::png);
  // Decode in the source, or in a map.
  for (const Dataset& ds :
       {Dataset(ImageFolderDataset(dir.string(), {.decode = true, .shuffle = false})),
        raw.map({vision::Decode()}, {"image"})}) {
    auto it2 = ds.create_tuple_iterator();
    int n = 0;
    while (it2.next(row)) {
      EXPECT_EQ(row[0].shape(), (Shape{4, 6, 3}));
      EXPECT_NEAR(row[0].to_vector<float>()[5], 77, 3);
      ++n;
    }
    EXPECT_EQ(n, 3);
  }
  ImageFolderDataset dogs(dir.string(), {.class_indexing = {{"dog", 5}}});
  EXPECT_EQ(run_values(dogs, 1), (std::vector<int64_t>{5}));
  // A corrupt file: the error names the file.
  write_file(dir / "dog" / "d.png", {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0}, false);
  try {
    run_values(
        ImageFolderDataset(dir.string(), {.shuffle = false}).map({vision::Decode()}, {"image"}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("d.png"), std::string::npos) << m;
    EXPECT_NE(m.find("Decode"), std::string::npos) << m;
  }
  EXPECT_THROW(ImageFolderDataset((dir / "nope").string()), FileError);
  fs::remove_all(dir);
}

TEST(Sources, NumpySlicesAreViewsAlongTheFirstDim) {
  Tensor x = Tensor::arange(12, DType::f32).view_as(Shape{4, 3}, Strides{3, 1}, 0);
  Tensor y = Tensor::from_vector(std::vector<int32_t>{7, 8, 9, 10}, Shape{4});
  NumpySlicesDataset ds({x, y}, {"x", "y"}, {.shuffle = false});
  EXPECT_EQ(ds.get_dataset_size(), 4);
  auto it = ds.create_tuple_iterator();
  std::vector<Tensor> row;
  ASSERT_TRUE(it.next(row));
  ASSERT_TRUE(it.next(row));
  EXPECT_EQ(row[0].to_vector<float>(), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(row[1].item<int32_t>(), 8);
  EXPECT_THROW(NumpySlicesDataset({x, Tensor::zeros(Shape{3})}, {"x", "y"}), Error);
  EXPECT_THROW(NumpySlicesDataset({x}, {"x", "y"}), Error);
}

}  // namespace
}  // namespace kiln::data::sources_test
