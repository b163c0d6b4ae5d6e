#pragma once
// `kiln predict CKPT IMAGE...|DIR [--top-k K] [--json]`: the top-k classes of each image, with
// probabilities, from a checkpoint written by `kiln train`. A folder means every .jpg/.jpeg/.png
// under it (sorted); images go through the network in batches.
// `kiln predict CKPT --prompt TEXT [--tokens N] [--temperature T]`: a language model's (gpt)
// continuation of TEXT, one token at a time (greedy at temperature 0, else sampled).
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

struct GenerateOptions {
  int64_t tokens = 100;      // how many to add
  double temperature = 0.0;  // 0: the most likely token each time; > 0: sampled from softmax(l/T)
  uint64_t seed = 1;         // of the sampling
};

// The prompt followed by the generated text. Error naming the byte when the prompt holds one the
// checkpoint's vocabulary lacks, or when the checkpoint is not a language model's.
std::string generate_text(const std::string& checkpoint, const std::string& prompt,
                          const GenerateOptions& options);

void add_predict_command(CLI::App& app);

}  // namespace kiln::cli

using kiln::cli::add_predict_command;
