#include "kiln/cli/trained_model.h"

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/models/zoo.h"
#include "kiln/train/checkpoint.h"

namespace kiln::cli {
namespace {

const std::string& required(const std::map<std::string, std::string>& metadata,
                            const std::string& key, const std::string& path) {
  auto it = metadata.find(key);
  if (it == metadata.end()) {
    throw FileError(path + ": metadata '" + key +
                    "' is missing; eval and predict need a checkpoint written by `kiln train` "
                    "(it records the model, its input and the class names)");
  }
  return it->second;
}

int64_t positive(const std::map<std::string, std::string>& metadata, const std::string& key,
                 const std::string& path) {
  const std::string& text = required(metadata, key, path);
  try {
    size_t used = 0;
    long long v = std::stoll(text, &used);
    if (used == text.size() && v > 0 && v <= (1 << 20)) return v;
  } catch (const std::exception&) {
  }
  throw FileError(path + ": metadata '" + key + "' must be an integer from 1 to 1048576, got '" +
                  text + "'");
}

template <class T>
std::vector<T> json_list(const std::map<std::string, std::string>& metadata, const std::string& key,
                         const std::string& path) {
  try {
    return nlohmann::json::parse(required(metadata, key, path)).get<std::vector<T>>();
  } catch (const nlohmann::json::exception& e) {
    throw FileError(path + ": metadata '" + key + "' is not a JSON list of the right type (" +
                    e.what() + ")");
  }
}

}  // namespace

std::map<std::string, std::string> to_checkpoint_metadata(const ModelDescription& d) {
  if (models::is_language_model(d.model)) {
    return {{"model", d.model},
            {"num_classes", std::to_string(d.input.num_classes)},
            {"context_length", std::to_string(d.text.context_length)},
            {"vocabulary", nlohmann::json(d.text.vocabulary).dump()}};
  }
  return {{"model", d.model},
          {"num_classes", std::to_string(d.input.num_classes)},
          {"in_channels", std::to_string(d.input.channels)},
          {"image_height", std::to_string(d.input.height)},
          {"image_width", std::to_string(d.input.width)},
          {"class_names", nlohmann::json(d.input.class_names).dump()},
          {"normalize_mean", nlohmann::json(d.normalization.mean).dump()},
          {"normalize_std", nlohmann::json(d.normalization.std).dump()}};
}

ModelDescription from_checkpoint_metadata(const std::map<std::string, std::string>& metadata,
                                          const std::string& path) {
  ModelDescription d;
  d.model = required(metadata, "model", path);
  if (models::is_language_model(d.model)) {
    d.input.num_classes = positive(metadata, "num_classes", path);
    d.text.context_length = positive(metadata, "context_length", path);
    d.text.vocabulary = json_list<uint8_t>(metadata, "vocabulary", path);
    if (int64_t(d.text.vocabulary.size()) != d.input.num_classes) {
      throw FileError(path + ": metadata 'vocabulary' has " +
                      std::to_string(d.text.vocabulary.size()) + " bytes for " +
                      std::to_string(d.input.num_classes) + " token ids");
    }
    return d;
  }
  d.input.num_classes = positive(metadata, "num_classes", path);
  d.input.channels = positive(metadata, "in_channels", path);
  d.input.height = positive(metadata, "image_height", path);
  d.input.width = positive(metadata, "image_width", path);
  d.input.class_names = json_list<std::string>(metadata, "class_names", path);
  d.normalization.mean = json_list<float>(metadata, "normalize_mean", path);
  d.normalization.std = json_list<float>(metadata, "normalize_std", path);
  if (int64_t(d.input.class_names.size()) != d.input.num_classes) {
    throw FileError(path + ": metadata 'class_names' has " +
                    std::to_string(d.input.class_names.size()) + " names for " +
                    std::to_string(d.input.num_classes) + " classes");
  }
  const size_t n = d.normalization.mean.size();
  if (n == 0 || n != d.normalization.std.size() || (n != 1 && int64_t(n) != d.input.channels)) {
    throw FileError(path + ": metadata 'normalize_mean' / 'normalize_std' must hold 1 or " +
                    std::to_string(d.input.channels) + " values each");
  }
  for (float s : d.normalization.std)
    if (!(s > 0)) throw FileError(path + ": metadata 'normalize_std' must be > 0");
  return d;
}

TrainedModel load_trained_model(const std::string& path) {
  train::Checkpoint checkpoint = train::load_checkpoint(path);
  TrainedModel m;
  m.description = from_checkpoint_metadata(checkpoint.metadata, path);
  const ModelDescription& d = m.description;
  m.network = models::create(d.model, {.num_classes = d.input.num_classes,
                                       .in_channels = d.input.channels,
                                       .image_height = d.input.height,
                                       .image_width = d.input.width,
                                       .context_length = d.text.context_length});
  train::load_param_into_net(*m.network, checkpoint, /*strict_load=*/true);
  m.network->set_train(false);
  return m;
}

}  // namespace kiln::cli
