// `kiln train --model gpt`: the language model on a text file, from flags or YAML, its report
// (validation loss, perplexity, token accuracy, tokens/s), its checkpoint metadata and the
// errors for text it cannot use.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/train_args.h"
#include "kiln/cli/predict_command.h"
#include "kiln/cli/train_command.h"
#include "kiln/cli/trained_model.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/data/text_dataset.h"
#include "kiln/models/zoo.h"
#include "kiln/train/checkpoint.h"
#include "testing/kiln_command.h"

namespace kiln::cli::gpt_train_test {
namespace {

namespace fs = std::filesystem;

bool have_default_corpus() {
  return fs::exists(data::kDefaultTextCorpus);
}

std::string temp_file(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() / ("kiln_gpt_" + std::to_string(::getpid()) + name);
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

std::string error_of(const TrainConfig& c) {
  std::ostringstream out;
  try {
    run_train(c, out);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

TrainConfig small_gpt() {
  TrainConfig c;
  c.model = "gpt";
  c.optimizer = "adam";
  c.schedule = "constant";
  c.lr = 3e-3;
  c.batch_size = 16;
  c.context = 32;
  c.threads = 2;
  c.print_every = 10;
  c.json = true;
  return c;
}

TEST(GptTrainCommand, ReportsPerplexityAndTokenThroughput) {
  if (!have_default_corpus()) GTEST_SKIP() << data::kDefaultTextCorpus << " is not installed";
  for (const char* mode : {"eager", "graph"}) {
    TrainConfig c = small_gpt();
    c.mode = mode;
    c.steps = 20;
    std::ostringstream out;
    TrainReport r = run_train(c, out);
    const std::string text = out.str();
    EXPECT_NE(text.find("data: /usr/share/common-licenses/GPL-3"), std::string::npos) << text;
    EXPECT_NE(text.find("perplexity: "), std::string::npos) << text;
    nlohmann::json j = nlohmann::json::parse(text.substr(text.rfind('\n', text.size() - 2) + 1));
    EXPECT_EQ(j["model"], "gpt");
    EXPECT_EQ(j["context_length"], 32);
    EXPECT_EQ(j["steps"], 20);
    EXPECT_NEAR(j["perplexity"].get<double>(), r.perplexity, 1e-6 * r.perplexity);
    EXPECT_NEAR(j["test_loss"].get<double>(), std::log(r.perplexity), 1e-6);
    // 20 steps already learn the letters' frequencies: far below a uniform guess.
    EXPECT_LT(r.perplexity, j["vocab_size"].get<double>() / 2) << mode;
    EXPECT_GT(r.perplexity, 1.0);
    EXPECT_NEAR(r.tokens_per_sec, r.images_per_sec * 32, 1e-6 * r.tokens_per_sec);
    EXPECT_GT(r.tokens_per_sec, 0);
  }
}

// The command as a user types it: defaults everywhere but the step count.
TEST(GptTrainCommand, KilnTrainModelGptRuns) {
  if (!have_default_corpus()) GTEST_SKIP() << data::kDefaultTextCorpus << " is not installed";
  kiln::testing::CommandResult r = kiln::testing::run_kiln(
      "train --model gpt --steps 3 --print-every 1 --mode graph", "OMP_NUM_THREADS=2 ");
  ASSERT_TRUE(r.exited) << r.output;
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("epoch: 1 step: 3, loss is "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("perplexity: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tokens/s"), std::string::npos) << r.output;
}

TEST(GptTrainCommand, ContextAndDataComeFromFlagsOrYaml) {
  const std::string yaml = temp_file("gpt.yaml", "model: gpt\ncontext: 16\ndata: text:/tmp/x\n");
  const TrainConfig seen = testing::parse_train_args({"--config", yaml, "--context", "24"});
  EXPECT_EQ(seen.model, "gpt");
  EXPECT_EQ(seen.context, 24);  // the command line wins
  EXPECT_EQ(seen.data, "text:/tmp/x");
  fs::remove(yaml);
}

TEST(GptTrainCommand, TextItCannotUseIsAnErrorNamingFileAndSizes) {
  TrainConfig c = small_gpt();
  c.data = "text:/nonexistent/story.txt";
  std::string e = error_of(c);
  EXPECT_NE(e.find("/nonexistent/story.txt"), std::string::npos) << e;
  EXPECT_NE(e.find("--data"), std::string::npos) << e;

  const std::string empty = temp_file("empty.txt", "");
  c.data = "text:" + empty;
  e = error_of(c);
  EXPECT_NE(e.find(empty), std::string::npos) << e;
  EXPECT_NE(e.find("empty"), std::string::npos) << e;

  const std::string short_text = temp_file("short.txt", std::string(200, 'q'));
  c.data = "text:" + short_text;
  c.context = 64;
  e = error_of(c);
  for (const std::string part : {short_text, std::string("200 bytes"), std::string("--context 64"),
                                 std::string("(last 20)")}) {
    EXPECT_NE(e.find(part), std::string::npos) << "'" << part << "' missing from: " << e;
  }
  fs::remove(empty);
  fs::remove(short_text);

  c = small_gpt();
  c.data = "fashion-mnist";
  e = error_of(c);
  EXPECT_NE(e.find("not text"), std::string::npos) << e;
  c = small_gpt();
  c.model = "lenet";
  c.data = "text";
  e = error_of(c);
  EXPECT_NE(e.find("--model gpt"), std::string::npos) << e;
  c = small_gpt();
  c.image_size = "32";
  e = error_of(c);
  EXPECT_NE(e.find("--image-size"), std::string::npos) << e;
}

// What a checkpoint of the language model carries: enough to rebuild it and encode prompts.
TEST(GptTrainCommand, CheckpointMetadataKeepsContextAndVocabulary) {
  ModelDescription d{.model = "gpt"};
  d.input.num_classes = 3;
  d.text = {.context_length = 48, .vocabulary = {10, 97, 255}};
  ModelDescription back = from_checkpoint_metadata(to_checkpoint_metadata(d), "x.safetensors");
  EXPECT_EQ(back.model, "gpt");
  EXPECT_EQ(back.input.num_classes, 3);
  EXPECT_EQ(back.text.context_length, 48);
  EXPECT_EQ(back.text.vocabulary, (std::vector<uint8_t>{10, 97, 255}));
  auto m = to_checkpoint_metadata(d);
  m["vocabulary"] = "[10, 97]";
  try {
    from_checkpoint_metadata(m, "x.safetensors");
    FAIL();
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("'vocabulary' has 2 bytes for 3"), std::string::npos)
        << e.what();
  }
}

// A small untrained gpt over the bytes of "abcdefgh \n", saved as `kiln train` would.
std::string gpt_checkpoint() {
  set_seed(3);
  const std::string vocabulary = "\n abcdefgh";
  ModelDescription d{.model = "gpt"};
  d.input.num_classes = int64_t(vocabulary.size());
  d.text = {.context_length = 8,
            .vocabulary = std::vector<uint8_t>(vocabulary.begin(), vocabulary.end())};
  auto net = models::create("gpt", {.num_classes = d.input.num_classes, .context_length = 8});
  const std::string path =
      (fs::temp_directory_path() / ("kiln_gpt_" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  train::save_checkpoint(*net, path, {.metadata = to_checkpoint_metadata(d)});
  return path;
}

TEST(GptPredict, GreedyContinuationFollowsTheModelsArgmax) {
  const std::string ckpt = gpt_checkpoint();
  const std::string text = generate_text(ckpt, "abc", {.tokens = 12});
  ASSERT_EQ(text.size(), 15u);
  EXPECT_EQ(text.substr(0, 3), "abc");
  // Reference: the same network, the whole sequence so far (its last 8 tokens) each time.
  TrainedModel m = load_trained_model(ckpt);
  data::TextCorpus vocab = data::text_corpus_from_vocabulary(m.description.text.vocabulary);
  std::vector<int32_t> ids = vocab.encode("abc");
  for (int k = 0; k < 12; ++k) {
    const int64_t n = std::min<int64_t>(int64_t(ids.size()), 8);
    std::vector<int32_t> window(ids.end() - n, ids.end());
    std::vector<float> logits =
        m.network->construct(Tensor::from_vector(window, {1, n})).to_vector<float>();
    auto last = logits.begin() + (n - 1) * 10;
    ids.push_back(int32_t(std::max_element(last, last + 10) - last));
  }
  EXPECT_EQ(text, vocab.decode(ids));
  // Sampling: reproducible from its seed, and the seed matters.
  const std::string a = generate_text(ckpt, "abc", {.tokens = 16, .temperature = 2.0, .seed = 1});
  EXPECT_EQ(a, generate_text(ckpt, "abc", {.tokens = 16, .temperature = 2.0, .seed = 1}));
  EXPECT_NE(a, generate_text(ckpt, "abc", {.tokens = 16, .temperature = 2.0, .seed = 2}));
  try {
    generate_text(ckpt, "abz", {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte 122"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(ckpt), std::string::npos) << e.what();
  }
  kiln::testing::CommandResult bad = kiln::testing::run_kiln("eval " + ckpt + " --data text");
  EXPECT_NE(bad.status, 0) << bad.output;
  EXPECT_NE(bad.output.find("language model"), std::string::npos) << bad.output;
  kiln::testing::CommandResult r =
      kiln::testing::run_kiln("predict " + ckpt + " --prompt abc --tokens 12");
  ASSERT_TRUE(r.exited) << r.output;
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, text + "\n");
  fs::remove(ckpt);
}

}  // namespace
}  // namespace kiln::cli::gpt_train_test
