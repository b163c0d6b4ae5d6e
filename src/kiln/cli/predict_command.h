#pragma once
// `kiln predict CKPT IMAGE...|DIR [--top-k K] [--json]`: the top-k classes of each image, with
// probabilities, from a checkpoint written by `kiln train`. A folder means every .jpg/.jpeg/.png
// under it (sorted); images go through the network in batches.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace kiln::cli {

struct Prediction {
  std::string file;
  std::vector<std::pair<std::string, double>> top;  // class name, probability; most likely first
};

std::vector<Prediction> run_predict(const std::string& checkpoint,
                                    const std::vector<std::string>& inputs, int64_t top_k,
                                    int64_t batch_size);
void print_predictions(const std::vector<Prediction>& predictions, std::ostream& out, bool json);

void add_predict_command(CLI::App& app);

}  // namespace kiln::cli

using kiln::cli::add_predict_command;
