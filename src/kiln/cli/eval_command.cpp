#include "kiln/cli/eval_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "kiln/cli/option_checks.h"
#include "kiln/cli/trained_model.h"
#include "kiln/core/error.h"
#include "kiln/models/zoo.h"
#include "kiln/ops/dispatch_chain.h"
#include "kiln/ops/functional.h"

namespace kiln::cli {

EvalReport run_eval(const std::string& checkpoint, const std::string& data_spec,
                    int64_t batch_size) {
  TrainedModel trained = load_trained_model(checkpoint);
  const ModelDescription& d = trained.description;
  if (models::is_language_model(d.model)) {
    throw Error("kiln eval: " + checkpoint + " holds a language model (" + d.model +
                "); eval measures image classifiers. `kiln train` reports its validation loss "
                "and perplexity, and `kiln predict " +
                checkpoint + " --prompt TEXT` continues a text");
  }
  DataRequest request;
  request.spec = data_spec;
  request.training = false;
  request.batch_size = batch_size;
  request.height = d.input.height;
  request.width = d.input.width;
  request.channels = d.input.channels;
  request.use_default_normalization = false;
  request.normalization = d.normalization;
  ImageData data = open_image_data(request);
  const int64_t classes = d.input.num_classes;
  if (data.info.num_classes > classes) {
    throw Error("kiln eval: --data " + data_spec + " has " + std::to_string(data.info.num_classes) +
                " classes, the model " + std::to_string(classes) + " (" + checkpoint + ")");
  }
  EvalReport r;
  r.class_names = d.input.class_names;
  r.confusion.assign(size_t(classes), std::vector<int64_t>(size_t(classes), 0));
  double loss_sum = 0;
  ops::NoGradGuard no_grad;
  data::TupleIterator it = data.batches.create_tuple_iterator({.num_epochs = 1});
  for (std::vector<Tensor> row; it.next(row);) {
    Tensor probs = ops::softmax(trained.network->construct(row[0]), -1).contiguous();
    Tensor labels = row[1].contiguous();
    const float* p = probs.data<float>();
    const int32_t* y = labels.data<int32_t>();
    for (int64_t i = 0; i < probs.dim(0); ++i) {
      const float* pi = p + i * classes;
      const int64_t predicted = std::max_element(pi, pi + classes) - pi;
      loss_sum -= std::log(std::max(pi[y[i]], 1e-12f));
      ++r.confusion[size_t(y[i])][size_t(predicted)];
      ++r.samples;
    }
  }
  if (r.samples == 0) throw Error("kiln eval: --data " + data_spec + " holds no samples");
  int64_t correct = 0;
  for (int64_t k = 0; k < classes; ++k) {
    int64_t total = 0;
    for (int64_t v : r.confusion[size_t(k)]) total += v;
    correct += r.confusion[size_t(k)][size_t(k)];
    r.per_class_accuracy.push_back(
        total > 0 ? double(r.confusion[size_t(k)][size_t(k)]) / double(total) : 0.0);
  }
  r.accuracy = double(correct) / double(r.samples);
  r.loss = loss_sum / double(r.samples);
  return r;
}

void print_eval_report(const EvalReport& r, std::ostream& out, bool json) {
  if (json) {
    nlohmann::ordered_json j;
    j["samples"] = r.samples;
    j["accuracy"] = r.accuracy;
    j["loss"] = r.loss;
    j["classes"] = r.class_names;
    j["per_class_accuracy"] = r.per_class_accuracy;
    j["confusion_matrix"] = r.confusion;
    out << j.dump() << std::endl;
    return;
  }
  out << std::fixed << std::setprecision(4) << "samples: " << r.samples
      << "\naccuracy: " << r.accuracy << "\nloss: " << r.loss << "\nper-class accuracy:\n";
  size_t width = 5;
  for (const auto& n : r.class_names) width = std::max(width, n.size());
  for (size_t k = 0; k < r.class_names.size(); ++k) {
    out << "  " << std::left << std::setw(int(width)) << r.class_names[k] << std::right << "  "
        << r.per_class_accuracy[k] << "\n";
  }
  out << "confusion matrix (rows: true class, columns: predicted, in class order):\n";
  for (size_t k = 0; k < r.confusion.size(); ++k) {
    out << "  " << std::left << std::setw(int(width)) << r.class_names[k] << std::right;
    for (int64_t v : r.confusion[k]) out << " " << std::setw(6) << v;
    out << "\n";
  }
  out << std::defaultfloat;
}

void add_eval_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "eval", "Accuracy, loss, per-class accuracy and confusion matrix of a checkpoint");
  auto checkpoint = std::make_shared<std::string>();
  auto spec = std::make_shared<std::string>();
  auto batch_size = std::make_shared<int64_t>(256);
  auto json = std::make_shared<bool>(false);
  cmd->add_option("CKPT", *checkpoint, "Checkpoint written by kiln train --ckpt-dir")->required();
  cmd->add_option("--data", *spec,
                  "imagefolder:DIR | record:FILES | fashion-mnist[:DIR] (test split) | "
                  "mnist[:DIR] (test split)")
      ->required();
  cmd->add_option("--batch-size", *batch_size, "Images per forward pass (default 256)")
      ->check(integer_in(1, 1 << 20));
  cmd->add_flag("--json", *json, "Print one JSON line instead of the table");
  cmd->callback(
      [=] { print_eval_report(run_eval(*checkpoint, *spec, *batch_size), std::cout, *json); });
}

}  // namespace kiln::cli
