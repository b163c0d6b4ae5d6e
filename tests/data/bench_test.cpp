// The bench runner, the source registry and the Fashion-MNIST training preset.
#include <filesystem>

#include "data_test_util.h"
#include "kiln/core/error.h"
#include "kiln/data/bench.h"
#include "kiln/data/presets.h"
#include "kiln/data/source_registry.h"

namespace kiln::data::bench_test {
namespace {

void register_test_images() {
  register_source_factory(
      "test-images",
      [](const std::string& arg, const SourceOptions& o) -> Dataset {
        int64_t n = arg.empty() ? 100 : std::stoll(arg);
        Tensor imgs = Tensor::zeros(Shape{n, 4, 4, 1}, DType::u8);
        Tensor labels = Tensor::zeros(Shape{n}, DType::i32);
        return NumpySlicesDataset({imgs, labels}, {"image", "label"}, o);
      },
      "test-images[:N]  N zero 4x4 images");
}

TEST(Bench, RunsAPipelineAndReportsJson) {
  register_test_images();
  EXPECT_TRUE(has_source_factory("test-images"));
  BenchOptions o;
  o.source = "test-images:130";
  o.transforms = {"rescale", "hflip", "vflip", "hwc2chw", "normalize", "randomcrop:4"};
  o.batch_size = 32;
  o.workers = 2;
  o.epochs = 2;
  BenchResult r = run_data_bench(o);
  EXPECT_EQ(r.batches, 8);  // 4 full batches per epoch, remainder dropped
  EXPECT_EQ(r.rows, 256);
  EXPECT_EQ(r.workers, 2);
  EXPECT_GT(r.samples_per_sec, 0);
  EXPECT_GT(r.peak_rss_mb, 0);
  std::string j = r.to_json(o);
  for (const char* key : {"\"samples_per_sec\":", "\"rows\":256", "\"batches\":8", "\"workers\":2",
                          "\"peak_rss_mb\":", "\"stages\":[", "\"bottleneck\":"}) {
    EXPECT_NE(j.find(key), std::string::npos) << key << " in " << j;
  }
  EXPECT_EQ(j.find('\n'), std::string::npos);  // one line
}

TEST(Bench, UnknownNamesAreClearErrors) {
  try {
    make_source("nosuch:thing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown source 'nosuch'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fashion-mnist"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_named_transform("sharpen"), Error);
  EXPECT_THROW(make_named_transform("randomcrop:x"), Error);
  EXPECT_THROW(make_source("imagefolder"), Error);
}

TEST(Presets, FashionMnistTrainingBatches) {
  if (!std::filesystem::exists(std::string(kDebianFashionMnistDir) +
                               "/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  FashionMnistPipelineOptions o;
  o.usage = "test";
  o.batch_size = 100;
  o.num_samples = 300;
  Dataset ds = fashion_mnist_pipeline(o);
  EXPECT_EQ(ds.get_dataset_size(), 3);
  auto it = ds.create_tuple_iterator({.num_epochs = 1});
  std::vector<Tensor> row;
  ASSERT_TRUE(it.next(row));
  EXPECT_EQ(row[0].shape(), (Shape{100, 1, 28, 28}));
  EXPECT_EQ(row[0].dtype(), DType::f32);
  EXPECT_EQ(row[1].shape(), (Shape{100}));
  EXPECT_EQ(row[1].dtype(), DType::i32);
  double sum = 0;
  for (float v : row[0].to_vector<float>()) sum += v;
  double mean = sum / double(row[0].numel());
  EXPECT_GT(mean, -0.5);  // normalized: near zero
  EXPECT_LT(mean, 0.5);
}

}  // namespace
}  // namespace kiln::data::bench_test
