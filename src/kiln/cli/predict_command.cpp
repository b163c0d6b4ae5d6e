#include "kiln/cli/predict_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "kiln/cli/option_checks.h"
#include "kiln/cli/trained_model.h"
#include "kiln/core/error.h"
#include "kiln/data/presets.h"
#include "kiln/data/text_dataset.h"
#include "kiln/models/zoo.h"
#include "kiln/ops/dispatch_chain.h"
#include "kiln/ops/functional.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// Files as given; folders become their image files, sorted.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (fs::is_directory(input, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(input))
        if (e.is_regular_file() && is_image_file(e.path())) found.push_back(e.path().string());
      if (found.empty()) throw FileError("kiln predict: " + input + " holds no .jpg/.png files");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(input, ec)) {
      files.push_back(input);
    } else {
      throw FileError("kiln predict: " + input + " does not exist");
    }
  }
  return files;
}

}  // namespace

std::vector<Prediction> run_predict(const std::string& checkpoint,
                                    const std::vector<std::string>& inputs, int64_t top_k,
                                    int64_t batch_size) {
  TrainedModel trained = load_trained_model(checkpoint);
  const ModelDescription& d = trained.description;
  const int64_t classes = d.input.num_classes;
  const int64_t k = std::min(top_k, classes);
  const std::vector<std::string> files = expand_inputs(inputs);
  data::Op to_float =
      data::image_batch_to_float(1.0 / 255.0, d.normalization.mean, d.normalization.std);
  const int64_t h = d.input.height, w = d.input.width, c = d.input.channels;
  std::vector<Prediction> out;
  ops::NoGradGuard no_grad;
  for (size_t begin = 0; begin < files.size(); begin += size_t(batch_size)) {
    const int64_t n = std::min<int64_t>(batch_size, int64_t(files.size() - begin));
    Tensor batch = Tensor::empty({n, h, w, c}, DType::u8);
    for (int64_t i = 0; i < n; ++i) {
      Tensor image = load_image_for_model(files[begin + size_t(i)], d.input).contiguous();
      std::memcpy(batch.data<uint8_t>() + i * h * w * c, image.data<uint8_t>(), size_t(h * w * c));
    }
    data::RowRng rng;
    Tensor probs =
        ops::softmax(trained.network->construct(to_float->apply_one(batch, rng)), -1).contiguous();
    const float* p = probs.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const float* pi = p + i * classes;
      std::vector<int64_t> order(static_cast<size_t>(classes));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [pi](int64_t a, int64_t b) { return pi[a] > pi[b]; });
      Prediction pred{files[begin + size_t(i)], {}};
      for (int64_t j = 0; j < k; ++j)
        pred.top.emplace_back(d.input.class_names[size_t(order[size_t(j)])], pi[order[size_t(j)]]);
      out.push_back(std::move(pred));
    }
  }
  return out;
}

std::string generate_text(const std::string& checkpoint, const std::string& prompt,
                          const GenerateOptions& o) {
  TrainedModel trained = load_trained_model(checkpoint);
  const ModelDescription& d = trained.description;
  if (!models::is_language_model(d.model)) {
    throw Error("kiln predict: --prompt needs a language model's checkpoint; " + checkpoint +
                " holds a " + d.model + " (give it images instead)");
  }
  if (prompt.empty()) throw Error("kiln predict: --prompt is empty; give at least one character");
  if (!(o.temperature >= 0 && std::isfinite(o.temperature))) {
    throw Error("kiln predict: --temperature must be a finite number >= 0");
  }
  data::TextCorpus vocabulary = data::text_corpus_from_vocabulary(d.text.vocabulary);
  std::vector<int32_t> ids;
  try {
    ids = vocabulary.encode(prompt);
  } catch (const Error& e) {
    throw Error("kiln predict: --prompt: " + std::string(e.what()) + " of " + checkpoint);
  }
  const int64_t v = d.input.num_classes, context = d.text.context_length;
  std::mt19937_64 gen(o.seed);
  ops::NoGradGuard no_grad;
  for (int64_t step = 0; step < o.tokens; ++step) {
    // The model sees at most its context: the last `context` tokens.
    const int64_t n = std::min<int64_t>(int64_t(ids.size()), context);
    std::vector<int32_t> window(ids.end() - n, ids.end());
    Tensor logits = trained.network->construct(Tensor::from_vector(window, {1, n})).contiguous();
    const float* last = logits.data<float>() + (n - 1) * v;
    int32_t next = int32_t(std::max_element(last, last + v) - last);
    if (o.temperature > 0) {
      std::vector<double> weights(static_cast<size_t>(v));
      for (int64_t k = 0; k < v; ++k)
        weights[size_t(k)] = std::exp((double(last[k]) - double(last[next])) / o.temperature);
      next = int32_t(std::discrete_distribution<int64_t>(weights.begin(), weights.end())(gen));
    }
    ids.push_back(next);
  }
  return vocabulary.decode(ids);
}

void print_predictions(const std::vector<Prediction>& predictions, std::ostream& out, bool json) {
  if (json) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const Prediction& p : predictions) {
      nlohmann::ordered_json top = nlohmann::ordered_json::array();
      for (const auto& [name, prob] : p.top)
        top.push_back({{"class", name}, {"probability", prob}});
      list.push_back({{"file", p.file}, {"top", top}});
    }
    out << nlohmann::ordered_json{{"predictions", list}}.dump() << std::endl;
    return;
  }
  out << std::fixed << std::setprecision(4);
  for (const Prediction& p : predictions) {
    out << p.file << ":";
    for (size_t j = 0; j < p.top.size(); ++j)
      out << (j ? ", " : " ") << p.top[j].first << " " << p.top[j].second;
    out << "\n";
  }
  out << std::defaultfloat;
}

void add_predict_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "predict", "Top-k classes of images, or a language model's continuation of --prompt");
  auto checkpoint = std::make_shared<std::string>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto top_k = std::make_shared<int64_t>(3);
  auto batch_size = std::make_shared<int64_t>(64);
  auto json = std::make_shared<bool>(false);
  cmd->add_option("CKPT", *checkpoint, "Checkpoint written by kiln train --ckpt-dir")->required();
  auto prompt = std::make_shared<std::string>();
  auto generate = std::make_shared<GenerateOptions>();
  CLI::Option* images =
      cmd->add_option("IMAGES", *inputs, "Image files (.jpg/.png) or folders of them");
  CLI::Option* prompt_option = cmd->add_option(
      "--prompt", *prompt, "Language models (gpt): continue this text instead of classifying");
  images->excludes(prompt_option);
  cmd->add_option("--tokens", generate->tokens, "With --prompt: tokens to generate (default 100)")
      ->check(integer_in(0, 1 << 20));
  cmd->add_option("--temperature", generate->temperature,
                  "With --prompt: 0 picks the most likely token (default); > 0 samples")
      ->check(finite_in(0, 100, /*lo_inclusive=*/true));
  cmd->add_option("--seed", generate->seed, "With --prompt: seed of the sampling")
      ->check(unsigned_integer());
  cmd->add_option("--top-k", *top_k, "Classes per image (default 3)")
      ->check(integer_in(1, 1 << 20));
  cmd->add_option("--batch-size", *batch_size, "Images per forward pass (default 64)")
      ->check(integer_in(1, 1 << 16));
  cmd->add_flag("--json", *json, "Print one JSON line");
  cmd->callback([=] {
    if (!prompt->empty()) {
      const std::string text = generate_text(*checkpoint, *prompt, *generate);
      if (*json) {
        std::cout << nlohmann::ordered_json{{"prompt", *prompt}, {"text", text}}.dump(
                         -1, ' ', false, nlohmann::json::error_handler_t::replace)
                  << std::endl;
      } else {
        std::cout << text << "\n";
      }
      return;
    }
    if (inputs->empty()) throw CLI::ValidationError("IMAGES", "give images (or --prompt TEXT)");
    print_predictions(run_predict(*checkpoint, *inputs, *top_k, *batch_size), std::cout, *json);
  });
}

}  // namespace kiln::cli
