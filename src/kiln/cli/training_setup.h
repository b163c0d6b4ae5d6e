#pragma once
// What a `kiln train` run trains and evaluates on, and the zoo network that fits it: images
// (data_spec.h) for the classifiers, text (text_data.h) for a language model (gpt). Each kind
// checks the flags that only apply to the other and says so.
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/cli/train_command.h"
#include "kiln/data/dataset.h"
#include "kiln/nn/cell.h"

namespace kiln::cli {

struct TrainingSetup {
  data::Dataset train, eval;
  std::shared_ptr<nn::Cell> net;
  std::string data_spec;    // the training data, as given or defaulted
  std::string description;  // the "data: ..." line
  std::string eval_data;    // what evaluation reads, for the JSON summary
  std::map<std::string, std::string> checkpoint_metadata;  // trained_model.h
  std::vector<std::string> metrics;                        // what the final evaluation reports
  int64_t tokens_per_row = 0;   // language models: the context (tokens/s = rows/s x this)
  nlohmann::ordered_json json;  // the data's fields of the JSON summary
};

// FileError when the data is missing or unreadable, Error naming the flag for a bad combination.
TrainingSetup open_training_setup(const TrainConfig& config);

}  // namespace kiln::cli
