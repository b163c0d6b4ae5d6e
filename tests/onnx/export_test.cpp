// The exporter around the mappings: the model's input, output and metadata, evaluation mode for
// the trace, the symbolic batch and its check, clear errors for what cannot export, and the
// atomic write.
#include "kiln/onnx/export.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "kiln/core/error.h"
#include "kiln/nn/nn.h"
#include "kiln/ops/functional.h"
#include "testing/file_contents.h"
#include "testing/onnx_tools.h"

namespace kiln::onnx::export_test {
namespace {

namespace fs = std::filesystem;

class FunctionCell : public nn::Cell {
 public:
  using Forward = std::function<Tensor(const Tensor&)>;
  explicit FunctionCell(Forward forward) : Cell("FunctionCell"), forward_(std::move(forward)) {}
  Tensor construct(const Tensor& x) override { return forward_(x); }

 private:
  Forward forward_;
};

class OnnxExport : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "kiln-onnx-export-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The error message of exporting `cell`, or "" when it exports.
  std::string export_error(nn::Cell& cell, const InputSpec& input, ExportOptions options = {}) {
    try {
      export_onnx(cell, input, (dir_ / "m.onnx").string(), options);
    } catch (const Error& e) {
      return e.what();
    }
    return {};
  }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    return names;
  }

  fs::path dir_;
};

TEST_F(OnnxExport, NamesTheInputAndOutputWithASymbolicBatchAndKeepsTheMetadata) {
  auto net = std::make_shared<nn::SequentialCell>(std::vector<std::shared_ptr<nn::Cell>>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Dense>(12, 5)});
  const std::string path = (dir_ / "dense.onnx").string();
  const ExportSummary s = export_onnx(*net, {.shape = {3, 2, 2}}, path,
                                      {.input_name = "images",
                                       .output_name = "logits",
                                       .doc_string = "what the input holds",
                                       .metadata = {{"class_names", R"(["a","b","c","d","e"])"}}});
  EXPECT_EQ(s.input, "images f32[batch, 3, 2, 2]");
  EXPECT_EQ(s.output, "logits f32[batch, 5]");
  EXPECT_EQ(s.initializers, 3);  // weight, bias and Flatten's target shape
  EXPECT_EQ(s.parameter_elements, 12 * 5 + 5 + 2);
  EXPECT_EQ(s.bytes, int64_t(fs::file_size(path)));
  const nlohmann::json m = kiln::testing::check_onnx_models({path})[0];
  ASSERT_TRUE(m["ok"].get<bool>()) << m["error"];
  EXPECT_EQ(m["inputs"][0]["name"], "images");
  EXPECT_EQ(m["inputs"][0]["dims"], nlohmann::json({"batch", 3, 2, 2}));
  EXPECT_EQ(m["outputs"][0]["name"], "logits");
  EXPECT_EQ(m["outputs"][0]["dims"], nlohmann::json({"batch", 5}));
  EXPECT_EQ(m["metadata"]["class_names"], R"(["a","b","c","d","e"])");
  EXPECT_EQ(files(), std::vector<std::string>{"dense.onnx"});  // no temporary left
}

TEST_F(OnnxExport, TracesInEvaluationModeAndGivesTheNetworkItsModeBack) {
  // BatchNorm in training mode would use batch statistics, which no inference model has.
  auto net = std::make_shared<nn::BatchNorm2d>(3);
  net->set_train(true);
  ASSERT_EQ(export_error(*net, {.shape = {3, 4, 4}}), "");
  EXPECT_TRUE(net->training());
  net->set_train(false);
  ASSERT_EQ(export_error(*net, {.shape = {3, 4, 4}}), "");
  EXPECT_FALSE(net->training());
}

TEST_F(OnnxExport, AFixedBatchSizeIsWrittenAsIs) {
  auto net = std::make_shared<nn::Dense>(4, 2);
  const std::string path = (dir_ / "fixed.onnx").string();
  const ExportSummary s = export_onnx(*net, {.shape = {4}}, path, {.batch_size = 7});
  EXPECT_EQ(s.input, "input f32[7, 4]");
  const nlohmann::json m = kiln::testing::check_onnx_models({path})[0];
  ASSERT_TRUE(m["ok"].get<bool>()) << m["error"];
  EXPECT_EQ(m["inputs"][0]["dims"], nlohmann::json({7, 4}));
  EXPECT_EQ(m["outputs"][0]["dims"], nlohmann::json({7, 2}));
}

TEST_F(OnnxExport, ANetworkThatUsesItsBatchSizeElsewhereNeedsAFixedBatch) {
  // [B, 4] -> [1, 4B]: the batch ends up inside dimension 1, where no symbolic dim can say it.
  FunctionCell net([](const Tensor& x) { return ops::reshape(x, {1, x.dim(0) * 4}); });
  const std::string error = export_error(net, {.shape = {4}});
  EXPECT_NE(error.find("batch sizes 2 and 3"), std::string::npos) << error;
  EXPECT_NE(error.find("reshape"), std::string::npos) << error;
  EXPECT_NE(error.find("--batch-size N"), std::string::npos) << error;
  EXPECT_TRUE(files().empty());
  EXPECT_EQ(export_error(net, {.shape = {4}}, {.batch_size = 3}), "");
}

TEST_F(OnnxExport, AnOpWithoutAMappingIsAnErrorNamingItAndWritesNothing) {
  const fs::path path = dir_ / "m.onnx";
  std::ofstream(path) << "an older model";
  FunctionCell net([](const Tensor& x) { return ops::relu_grad(x, x); });
  const std::string error = export_error(net, {.shape = {3}});
  EXPECT_NE(error.find("ONNX export: relu_grad(f32[2, 3], f32[2, 3])"), std::string::npos) << error;
  EXPECT_NE(error.find("op 'relu_grad' has no ONNX mapping: it computes a gradient"),
            std::string::npos)
      << error;
  EXPECT_EQ(kiln::testing::file_text(path), "an older model");
  EXPECT_EQ(files(), std::vector<std::string>{"m.onnx"});
}

TEST_F(OnnxExport, OpsForcedIntoTrainingModeAreRefused) {
  FunctionCell dropout([](const Tensor& x) { return ops::dropout(x, 0.5, true)[0]; });
  std::string error = export_error(dropout, {.shape = {3}});
  EXPECT_NE(error.find("dropout"), std::string::npos) << error;
  EXPECT_NE(error.find("training mode cannot be exported"), std::string::npos) << error;
  const Tensor ones = Tensor::ones({3}), zeros = Tensor::zeros({3});
  FunctionCell batch_stats([&](const Tensor& x) {
    return ops::batch_norm(x, ones, zeros, zeros, ones, true, 0.9, 1e-5)[0];
  });
  error = export_error(batch_stats, {.shape = {3, 2, 2}});
  EXPECT_NE(error.find("batch_norm(f32[2, 3, 2, 2]"), std::string::npos) << error;
  EXPECT_NE(error.find("training=true"), std::string::npos) << error;
}

TEST_F(OnnxExport, AnOutputOnlyTrainingComputesIsAnErrorNamingIt) {
  const Tensor gamma = Tensor::ones({3}), beta = Tensor::zeros({3});
  // layer_norm's saved mean, read by a later op and returned as if it were a result.
  FunctionCell read(
      [&](const Tensor& x) { return ops::exp(ops::layer_norm(x, gamma, beta, 1e-5)[1]); });
  std::string error = export_error(read, {.shape = {3}});
  EXPECT_NE(error.find("ONNX export: exp(f32[2]): input 0 comes from output 1 of layer_norm"),
            std::string::npos)
      << error;
  FunctionCell returned([&](const Tensor& x) { return ops::layer_norm(x, gamma, beta, 1e-5)[2]; });
  error = export_error(returned, {.shape = {3}});
  EXPECT_NE(error.find("the network returns output 2 of layer_norm"), std::string::npos) << error;
}

TEST_F(OnnxExport, ANetworkReturningItsInputExportsAnIdentity) {
  FunctionCell net([](const Tensor& x) { return x; });
  const std::string path = (dir_ / "identity.onnx").string();
  export_onnx(net, {.shape = {2}}, path, {});
  const nlohmann::json m = kiln::testing::check_onnx_models({path})[0];
  ASSERT_TRUE(m["ok"].get<bool>()) << m["error"];
  ASSERT_EQ(m["nodes"].size(), 1u);
  EXPECT_EQ(m["nodes"][0]["op_type"], "Identity");
}

TEST_F(OnnxExport, WriteErrorsNameTheFile) {
  auto net = std::make_shared<nn::Dense>(4, 2);
  const std::string missing = (dir_ / "no-such-folder" / "m.onnx").string();
  try {
    export_onnx(*net, {.shape = {4}}, missing, {});
    FAIL() << "exported into a missing folder";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  try {
    export_onnx(*net, {.shape = {4}}, dir_.string(), {});
    FAIL() << "exported over a folder";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder"), std::string::npos) << e.what();
  }
  EXPECT_NE(export_error(*net, {.shape = {4}}, {.input_name = "x", .output_name = "x"})
                .find("two different, non-empty names"),
            std::string::npos);
}

TEST_F(OnnxExport, ReplacingAModelLeavesOnlyTheNewOne) {
  const fs::path path = dir_ / "m.onnx";
  std::ofstream(path) << "an older model";
  // What an export killed while writing left: removed by the next export of the same file.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  std::ofstream(dir_ / (".m.onnx.tmp-" + std::to_string(gone))) << "half a model";
  auto net = std::make_shared<nn::Dense>(4, 2);
  const std::string bytes = onnx_model_bytes(*net, {.shape = {4}}, {});
  export_onnx(*net, {.shape = {4}}, path.string(), {});
  EXPECT_EQ(kiln::testing::file_text(path), bytes);
  EXPECT_EQ(files(), std::vector<std::string>{"m.onnx"});
}

}  // namespace
}  // namespace kiln::onnx::export_test
