// The CLI's data pipelines (cli/data_spec.h) against the rows of their source: images of the
// model's size go straight to the batch (no row stage), resized ones through the row stage, and
// both give the source's pixels normalized, [B, C, H, W].
#include "kiln/cli/data_spec.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/data/dataset.h"

namespace kiln::cli::data_spec_test {
namespace {

bool have_fashion_mnist() {
  return std::filesystem::exists(std::string(data::kDebianFashionMnistDir) +
                                 "/t10k-images-idx3-ubyte.gz");
}

DataRequest evaluation_request(int64_t batch) {
  DataRequest r;
  r.spec = "fashion-mnist";
  r.training = false;  // the test split, in file order
  r.batch_size = batch;
  r.use_default_normalization = false;
  r.normalization = {.mean = {0.5f}, .std = {0.25f}};
  return r;
}

std::vector<Tensor> first_batch(const ImageData& d) {
  auto it = d.batches.create_tuple_iterator({.num_epochs = 1});
  std::vector<Tensor> batch;
  EXPECT_TRUE(it.next(batch));
  return batch;
}

TEST(DataSpec, ImagesOfTheModelsSizeAreTheSourcesPixelsNormalized) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  constexpr int64_t kBatch = 5;
  const ImageData d = open_image_data(evaluation_request(kBatch));
  EXPECT_EQ(d.info.channels, 1);
  EXPECT_EQ(d.info.height, 28);
  const std::vector<Tensor> batch = first_batch(d);
  ASSERT_EQ(batch[0].shape(), (Shape{kBatch, 1, 28, 28}));
  ASSERT_EQ(batch[1].shape(), (Shape{kBatch}));

  data::FashionMnistDataset rows("", {.usage = "test", .shuffle = false});
  auto it = rows.take(kBatch).create_tuple_iterator();
  const std::vector<float> images = batch[0].contiguous().to_vector<float>();
  const std::vector<int32_t> labels = batch[1].to_vector<int32_t>();
  std::vector<Tensor> row;
  for (int64_t n = 0; n < kBatch; ++n) {
    ASSERT_TRUE(it.next(row));
    const std::vector<uint8_t> pixels = row[0].contiguous().to_vector<uint8_t>();
    ASSERT_EQ(pixels.size(), 28u * 28u);
    int mismatches = 0;
    for (size_t i = 0; i < pixels.size(); ++i) {
      const float expected = (float(pixels[i]) / 255.0f - 0.5f) / 0.25f;
      mismatches += std::abs(images[size_t(n) * pixels.size() + i] - expected) > 1e-5f;
    }
    EXPECT_EQ(mismatches, 0) << "image " << n;
    EXPECT_EQ(labels[size_t(n)], row[1].item<int32_t>()) << "image " << n;
  }
}

// A resize needs the row stage: the same images at 32 x 32, the same labels, and a uniform
// image stays uniform.
TEST(DataSpec, ResizedImagesGoThroughTheRowStage) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  DataRequest r = evaluation_request(4);
  r.height = r.width = 32;
  const std::vector<Tensor> resized = first_batch(open_image_data(r));
  const std::vector<Tensor> plain = first_batch(open_image_data(evaluation_request(4)));
  ASSERT_EQ(resized[0].shape(), (Shape{4, 1, 32, 32}));
  EXPECT_EQ(resized[1].to_vector<int32_t>(), plain[1].to_vector<int32_t>());
  // The first test image's corner is background in both (the shoe sits in the middle).
  EXPECT_NEAR(resized[0].contiguous().to_vector<float>()[0],
              plain[0].contiguous().to_vector<float>()[0], 1e-5);
}

}  // namespace
}  // namespace kiln::cli::data_spec_test
