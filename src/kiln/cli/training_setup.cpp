#include "kiln/cli/training_setup.h"

#include <algorithm>
#include <sstream>

#include "kiln/cli/data_spec.h"
#include "kiln/cli/text_data.h"
#include "kiln/cli/trained_model.h"
#include "kiln/core/error.h"
#include "kiln/models/zoo.h"

namespace kiln::cli {
namespace {

TrainingSetup image_setup(const TrainConfig& c) {
  if (is_text_spec(c.data)) {
    throw Error("kiln train: --data " + c.data + " is text; --model " + c.model +
                " classifies images (give --model gpt for text)");
  }
  if (!c.data.empty() && !c.data_dir.empty()) {
    throw Error("kiln train: give --data or --data-dir, not both (--data fashion-mnist:" +
                c.data_dir + " says the same)");
  }
  DataRequest request;
  request.spec =
      !c.data.empty() ? c.data : "fashion-mnist" + (c.data_dir.empty() ? "" : ":" + c.data_dir);
  request.batch_size = c.batch_size;
  request.transforms = parse_transforms(c.transforms);
  if (!c.image_size.empty())
    std::tie(request.height, request.width) = parse_image_size(c.image_size);
  request.channels = c.channels;
  ImageData train_data = open_image_data(request);
  const ImageDataInfo& info = train_data.info;
  // Evaluation reads the data the same way (size, channels, normalization), without augmentation.
  DataRequest eval_request = request;
  eval_request.spec = !c.val.empty() ? c.val : default_validation_spec(request.spec);
  eval_request.flag = "--val";
  eval_request.training = false;
  eval_request.batch_size = std::max<int64_t>(c.batch_size, 256);
  eval_request.height = info.height;
  eval_request.width = info.width;
  eval_request.channels = info.channels;
  eval_request.use_default_normalization = false;
  eval_request.normalization = train_data.normalization;
  eval_request.transforms.has_normalization = false;
  const bool eval_on_training_data = eval_request.spec.empty();
  if (eval_on_training_data) eval_request.spec = request.spec;
  ImageData eval_data = open_image_data(eval_request);
  if (eval_data.info.num_classes > info.num_classes) {
    throw Error("kiln train: --val " + eval_request.spec + " has " +
                std::to_string(eval_data.info.num_classes) + " classes, the training data " +
                std::to_string(info.num_classes));
  }
  TrainingSetup s;
  s.train = train_data.batches;
  s.eval = eval_data.batches;
  s.net = models::create(c.model, {.num_classes = info.num_classes,
                                   .in_channels = info.channels,
                                   .image_height = info.height,
                                   .image_width = info.width});
  s.data_spec = request.spec;
  s.eval_data = eval_on_training_data ? "training data" : eval_request.spec;
  std::ostringstream line;
  line << "data: " << request.spec << ": " << info.num_classes << " classes, " << info.channels
       << "x" << info.height << "x" << info.width << " images; evaluation on "
       << (eval_on_training_data ? "the training data (no --val)" : eval_request.spec);
  s.description = line.str();
  s.checkpoint_metadata = to_checkpoint_metadata({c.model, info, train_data.normalization});
  s.metrics = {"accuracy", "loss"};
  s.json["num_classes"] = info.num_classes;
  s.json["input_shape"] = {info.channels, info.height, info.width};
  return s;
}

TrainingSetup text_setup(const TrainConfig& c) {
  const std::string spec = c.data.empty() ? "text" : c.data;
  if (!is_text_spec(spec)) {
    throw Error("kiln train: --model " + c.model + " is a language model; --data " + spec +
                " is not text (give text:FILE, or leave --data out for " +
                data::kDefaultTextCorpus + ")");
  }
  auto image_only = [&](const char* flag, const std::string& value) {
    if (!value.empty()) {
      throw Error(std::string("kiln train: ") + flag + " " + value +
                  " is for image data; --model " + c.model + " reads text");
    }
  };
  image_only("--data-dir", c.data_dir);
  image_only("--image-size", c.image_size);
  image_only("--channels", c.channels == 0 ? "" : std::to_string(c.channels));
  image_only("--transforms", c.transforms);
  if (!c.val.empty()) {
    throw Error("kiln train: --val " + c.val + ": a language model is evaluated on the last 10 % " +
                "of its --data text; leave --val out");
  }
  TextData text = open_text_data({.spec = spec,
                                  .context_length = c.context,
                                  .batch_size = c.batch_size,
                                  .validation_batch_size = std::max<int64_t>(c.batch_size, 64)});
  const data::TextCorpus& corpus = *text.corpus;
  TrainingSetup s;
  s.train = text.train;
  s.eval = text.validation;
  s.net =
      models::create(c.model, {.num_classes = corpus.vocab_size(), .context_length = c.context});
  s.data_spec = spec;
  s.eval_data = detail::concat("last ", text.validation_tokens, " bytes of ", corpus.path);
  s.description = detail::concat("data: ", corpus.path, ": ", corpus.num_tokens(), " bytes, ",
                                 corpus.vocab_size(), " distinct (the vocabulary); context ",
                                 c.context, "; training on the first ", text.train_tokens,
                                 " bytes, evaluation on the last ", text.validation_tokens);
  ModelDescription d{.model = c.model};
  d.input.num_classes = corpus.vocab_size();
  d.text = {.context_length = c.context, .vocabulary = corpus.vocabulary};
  s.checkpoint_metadata = to_checkpoint_metadata(d);
  s.metrics = {"loss", "perplexity", "accuracy"};
  s.tokens_per_row = c.context;
  s.json["vocab_size"] = corpus.vocab_size();
  s.json["context_length"] = c.context;
  return s;
}

}  // namespace

TrainingSetup open_training_setup(const TrainConfig& c) {
  return models::is_language_model(c.model) ? text_setup(c) : image_setup(c);
}

}  // namespace kiln::cli
