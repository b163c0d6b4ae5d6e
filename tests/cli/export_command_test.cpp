// `kiln export CKPT --format onnx -o model.onnx` on every zoo model, as a user runs it: a
// checkpoint made by `kiln train` (two steps on a generated 3-class image folder, or on a small
// text for the GPT), exported by the binary, accepted by the ONNX checker (Debian's
// python3-onnx), and, where onnxruntime-node is installed, computing in an ONNX runtime what
// Kiln's own predict computes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "kiln/cli/data_spec.h"
#include "kiln/cli/predict_command.h"
#include "kiln/cli/trained_model.h"
#include "kiln/data/presets.h"
#include "kiln/data/text_dataset.h"
#include "kiln/data/vision.h"
#include "kiln/models/zoo.h"
#include "kiln/ops/dispatch_chain.h"
#include "testing/kiln_command.h"
#include "testing/onnx_tools.h"

namespace kiln::cli::export_command_test {
namespace {

namespace fs = std::filesystem;
using namespace kiln;
using kiln::testing::CommandResult;

constexpr int64_t kContext = 16;  // the GPT's: small, so its trace and test stay quick

CommandResult run(const std::string& args) {
  return kiln::testing::run_kiln(args, "OMP_NUM_THREADS=1 ");
}

// Softmax of each row of `logits` (n rows of `classes`).
std::vector<double> softmax_rows(const std::vector<double>& logits, int64_t classes) {
  std::vector<double> p(logits.size());
  for (size_t row = 0; row < logits.size(); row += size_t(classes)) {
    double top = -1e300, sum = 0;
    for (int64_t k = 0; k < classes; ++k) top = std::max(top, logits[row + size_t(k)]);
    for (int64_t k = 0; k < classes; ++k)
      sum += p[row + size_t(k)] = std::exp(logits[row + size_t(k)] - top);
    for (int64_t k = 0; k < classes; ++k) p[row + size_t(k)] /= sum;
  }
  return p;
}

class ExportCommand : public ::testing::Test {
 protected:
  // The tests' image folder and text, made once for all the tests here; the checkpoints are
  // trained when a test first needs them (each test runs in a process of its own).
  static void SetUpTestSuite() {
    std::string templ = (fs::temp_directory_path() / "kiln-export-XXXXXX").string();
    if (!::mkdtemp(templ.data())) return;
    root_ = new fs::path(templ);
    write_image_folder(*root_ / "images");
    std::ofstream text(*root_ / "text.txt");
    for (int i = 0; i < 40; ++i) text << "the quick brown fox jumps over the lazy dog\n";
  }
  static void TearDownTestSuite() {
    checkpoints_.clear();
    if (root_) fs::remove_all(*root_);
    delete root_;
    root_ = nullptr;
  }

  void SetUp() override {
    if (!fs::exists(kiln::testing::kiln_exe()))
      GTEST_SKIP() << "no kiln binary (build target kiln_cli_main)";
    ASSERT_NE(root_, nullptr);
  }

  // The checkpoint `kiln train` writes for the zoo model after two steps; "" (and a failure)
  // when it writes none.
  std::string trained_checkpoint(const std::string& model) {
    if (auto found = checkpoints_.find(model); found != checkpoints_.end()) return found->second;
    const fs::path dir = *root_ / ("ckpt-" + model);
    const std::string data = models::is_language_model(model)
                                 ? "--data text:" + (*root_ / "text.txt").string() + " --context " +
                                       std::to_string(kContext) + " --optimizer adam"
                                 : "--data imagefolder:" + (*root_ / "images").string() +
                                       " --transforms normalize:0.5:0.25";
    CommandResult r = run("train --model " + model + " " + data +
                          " --steps 2 --batch-size 6 --mode eager --print-every 0 --seed 3"
                          " --ckpt-dir " +
                          dir.string());
    if (r.status == 0 && fs::is_directory(dir)) {
      for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".safetensors") return checkpoints_[model] = e.path().string();
    }
    ADD_FAILURE() << "kiln train made no " << model << " checkpoint:\n" << r.output;
    return "";
  }

  // Three easy classes: noisy red, green and blue 16x16 PNGs.
  static void write_image_folder(const fs::path& dir) {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> noise(0, 60);
    const char* names[] = {"blue", "green", "red"};
    for (int cls = 0; cls < 3; ++cls) {
      fs::create_directories(dir / names[cls]);
      for (int i = 0; i < 4; ++i) {
        Tensor image = Tensor::empty({16, 16, 3}, DType::u8);
        uint8_t* px = image.data<uint8_t>();
        for (int p = 0; p < 16 * 16 * 3; ++p)
          px[p] = uint8_t(p % 3 == 2 - cls ? 255 - noise(rng) : noise(rng));
        std::vector<uint8_t> png = data::vision::encode_png(image);
        std::ofstream(dir / names[cls] / ("img" + std::to_string(i) + ".png"), std::ios::binary)
            .write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
      }
    }
  }

  // `kiln export` of the model's checkpoint into the test folder; the model's path.
  std::string exported(const std::string& model) {
    const std::string path = (*root_ / (model + ".onnx")).string();
    if (!fs::exists(path)) {
      CommandResult r = run("export " + trained_checkpoint(model) + " --format onnx -o " + path);
      EXPECT_EQ(r.status, 0) << r.output;
      EXPECT_NE(r.output.find("kiln export: wrote " + path + " (ONNX opset 17"), std::string::npos)
          << r.output;
    }
    return path;
  }

  static fs::path* root_;
  static std::map<std::string, std::string> checkpoints_;  // kept for the suite's other tests
};

fs::path* ExportCommand::root_ = nullptr;
std::map<std::string, std::string> ExportCommand::checkpoints_;

TEST_F(ExportCommand, EveryZooModelExportsAndPassesTheOnnxChecker) {
  std::vector<std::string> names = models::model_names(), paths;
  for (const std::string& model : names) paths.push_back(exported(model));
  const nlohmann::json checked = kiln::testing::check_onnx_models(paths);
  ASSERT_EQ(checked.size(), names.size());
  for (size_t k = 0; k < names.size(); ++k) {
    const nlohmann::json& m = checked[k];
    ASSERT_TRUE(m["ok"].get<bool>()) << names[k] << ": " << m["error"];
    EXPECT_EQ(m["opset"], 17);
    EXPECT_EQ(m["metadata"]["model"], names[k]);
    EXPECT_EQ(m["outputs"][0]["name"], "logits");
    if (models::is_language_model(names[k])) {
      EXPECT_EQ(m["inputs"][0]["name"], "tokens");
      EXPECT_EQ(m["inputs"][0]["dims"], nlohmann::json({"batch", kContext}));
      EXPECT_EQ(m["outputs"][0]["dims"][0], "batch");
      EXPECT_EQ(m["outputs"][0]["dims"][1], kContext);
      EXPECT_TRUE(m["metadata"].contains("vocabulary"));
    } else {
      EXPECT_EQ(m["inputs"][0]["name"], "images");
      EXPECT_EQ(m["inputs"][0]["dims"], nlohmann::json({"batch", 3, 16, 16})) << names[k];
      EXPECT_EQ(m["outputs"][0]["dims"], nlohmann::json({"batch", 3})) << names[k];
      EXPECT_EQ(m["metadata"]["class_names"], R"(["blue","green","red"])");
      EXPECT_EQ(m["metadata"]["normalize_mean"], "[0.5]");
    }
  }
}

TEST_F(ExportCommand, OnnxRuntimeGivesKilnPredictsProbabilitiesForEveryImageModel) {
  const std::string missing = kiln::testing::onnx_runtime_missing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(*root_ / "images"))
    if (e.is_regular_file()) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  // Every model's images through one run of the ONNX runtime (its start-up is most of a run).
  std::vector<std::string> image_models;
  std::vector<std::vector<cli::Prediction>> predictions;
  std::vector<std::vector<std::string>> class_names;
  nlohmann::json jobs = nlohmann::json::array();
  for (const std::string& model : models::model_names()) {
    if (models::is_language_model(model)) continue;
    const std::string path = trained_checkpoint(model);
    ASSERT_FALSE(path.empty());
    image_models.push_back(model);
    predictions.push_back(cli::run_predict(path, files, 3, 5));
    // The batch predict feeds its network, made the way predict makes it.
    cli::TrainedModel trained = cli::load_trained_model(path);
    const cli::ModelDescription& d = trained.description;
    class_names.push_back(d.input.class_names);
    const int64_t n = int64_t(files.size()), h = d.input.height, w = d.input.width,
                  c = d.input.channels;
    Tensor pixels = Tensor::empty({n, h, w, c}, DType::u8);
    for (int64_t i = 0; i < n; ++i) {
      Tensor image = cli::load_image_for_model(files[size_t(i)], d.input).contiguous();
      std::memcpy(pixels.data<uint8_t>() + i * h * w * c, image.data<uint8_t>(), size_t(h * w * c));
    }
    data::RowRng rng;
    const Tensor images =
        data::image_batch_to_float(1.0 / 255.0, d.normalization.mean, d.normalization.std)
            ->apply_one(pixels, rng);
    jobs.push_back(
        {{"model", exported(model)}, {"inputs", {{"images", kiln::testing::onnx_input(images)}}}});
  }
  const nlohmann::json outputs = kiln::testing::run_onnx_models(jobs, root_->string());
  ASSERT_EQ(outputs.size(), image_models.size());
  const int64_t n = int64_t(files.size());
  for (size_t m = 0; m < image_models.size(); ++m) {
    const std::string& model = image_models[m];
    const nlohmann::json& out = outputs[m]["logits"];
    ASSERT_EQ(out["dims"], nlohmann::json({n, 3})) << model;
    const std::vector<double> p = softmax_rows(out["data"].get<std::vector<double>>(), 3);
    const std::vector<cli::Prediction>& predicted = predictions[m];
    const std::vector<std::string>& names = class_names[m];
    ASSERT_EQ(predicted.size(), files.size());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(predicted[size_t(i)].top.size(), 3u);
      for (const auto& [name, probability] : predicted[size_t(i)].top) {
        const size_t k = size_t(std::find(names.begin(), names.end(), name) - names.begin());
        EXPECT_NEAR(p[size_t(i) * 3 + k], probability, 1e-5)
            << model << " " << files[size_t(i)] << " " << name;
      }
    }
  }
}

TEST_F(ExportCommand, OnnxRuntimeGivesTheGptsLogitsAndItsGreedyNextToken) {
  const std::string missing = kiln::testing::onnx_runtime_missing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  const std::string checkpoint = trained_checkpoint("gpt");
  cli::TrainedModel trained = cli::load_trained_model(checkpoint);
  const int64_t vocabulary = trained.description.input.num_classes;
  data::TextCorpus corpus = data::text_corpus_from_vocabulary(trained.description.text.vocabulary);
  // Random ids at batch 3, and a prompt right-padded to the context: attention is causal, so the
  // padding changes nothing at the prompt's own positions.
  std::mt19937 rng(9);
  std::vector<int64_t> ids(size_t(3 * kContext));
  for (int64_t& id : ids) id = std::uniform_int_distribution<int64_t>(0, vocabulary - 1)(rng);
  const Tensor random = Tensor::from_vector(ids, {3, kContext});
  const std::string prompt = "the quick b";
  std::vector<int64_t> padded;
  for (int32_t id : corpus.encode(prompt)) padded.push_back(id);
  const int64_t n = int64_t(padded.size());
  padded.resize(size_t(kContext), 0);
  nlohmann::json jobs = nlohmann::json::array();
  for (const Tensor& tokens : {random, Tensor::from_vector(padded, {1, kContext})})
    jobs.push_back(
        {{"model", exported("gpt")}, {"inputs", {{"tokens", kiln::testing::onnx_input(tokens)}}}});
  const nlohmann::json outputs = kiln::testing::run_onnx_models(jobs, root_->string());

  ops::NoGradGuard no_grad;
  const Tensor logits = trained.network->construct(random).contiguous();
  EXPECT_EQ(outputs[0]["logits"]["dims"], nlohmann::json({3, kContext, vocabulary}));
  EXPECT_LT(kiln::testing::scaled_max_difference(
                outputs[0]["logits"]["data"].get<std::vector<double>>(), logits.to_vector<float>()),
            1e-5);
  // What predict computes for the prompt: the unpadded window.
  const std::vector<int64_t> window(padded.begin(), padded.begin() + n);
  const std::vector<float> own = trained.network->construct(Tensor::from_vector(window, {1, n}))
                                     .contiguous()
                                     .to_vector<float>();
  const std::vector<double> all = outputs[1]["logits"]["data"].get<std::vector<double>>();
  const std::vector<double> at_prompt(all.begin(), all.begin() + n * vocabulary);
  EXPECT_LT(kiln::testing::scaled_max_difference(at_prompt, own), 1e-5);
  const auto last = at_prompt.end() - vocabulary;
  const int32_t next = int32_t(std::max_element(last, at_prompt.end()) - last);
  EXPECT_EQ(cli::generate_text(checkpoint, prompt, {.tokens = 1}),
            prompt + corpus.decode(std::vector<int32_t>{next}));
}

TEST_F(ExportCommand, DefaultPathFixedBatchAndBadArgumentsAreOneLineErrors) {
  // Without -o: beside the checkpoint, as .onnx.
  const std::string checkpoint = trained_checkpoint("mlp");
  CommandResult r = run("export " + checkpoint + " --batch-size 4");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string beside = fs::path(checkpoint).replace_extension(".onnx").string();
  EXPECT_NE(r.output.find("input images f32[4, 3, 16, 16] -> output logits f32[4, 3]"),
            std::string::npos)
      << r.output;
  const nlohmann::json m = kiln::testing::check_onnx_models({beside})[0];
  ASSERT_TRUE(m["ok"].get<bool>()) << m["error"];
  EXPECT_EQ(m["inputs"][0]["dims"], nlohmann::json({4, 3, 16, 16}));

  struct Case {
    std::string args, expected;
  };
  const std::string missing_folder = (*root_ / "nowhere" / "m.onnx").string();
  const std::string not_a_checkpoint = (*root_ / "text.txt").string();
  const Case cases[] = {
      {"export " + checkpoint + " --format tflite", "--format: tflite not in {onnx}"},
      {"export " + checkpoint + " -o " + missing_folder,
       missing_folder + ": cannot write: the folder"},
      {"export " + not_a_checkpoint, not_a_checkpoint},
      {"export " + checkpoint + " --batch-size 0", "--batch-size"},
      {"export " + checkpoint + " -o " + checkpoint, "would replace its checkpoint"},
  };
  for (const Case& c : cases) {
    CommandResult bad = run(c.args);
    EXPECT_EQ(bad.status, 2) << c.args << "\n" << bad.output;
    EXPECT_NE(bad.output.find(c.expected), std::string::npos) << c.args << "\n" << bad.output;
    EXPECT_EQ(bad.output.rfind("kiln: error: ", 0), 0u) << bad.output;
    EXPECT_EQ(std::count(bad.output.begin(), bad.output.end(), '\n'), 1) << bad.output;
  }
}

}  // namespace
}  // namespace kiln::cli::export_command_test
