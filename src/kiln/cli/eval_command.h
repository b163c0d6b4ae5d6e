#pragma once
// `kiln eval CKPT --data SPEC [--json]`: accuracy, loss, per-class accuracy and the confusion
// matrix of a checkpoint written by `kiln train`, on any data of data_spec.h's grammar.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace kiln::cli {

struct EvalReport {
  int64_t samples = 0;
  double accuracy = 0;
  double loss = 0;  // mean cross-entropy
  std::vector<std::string> class_names;
  std::vector<std::vector<int64_t>> confusion;  // [true class][predicted class]
  std::vector<double> per_class_accuracy;       // NaN-free: 0 for a class without samples
};

EvalReport run_eval(const std::string& checkpoint, const std::string& data_spec,
                    int64_t batch_size);
void print_eval_report(const EvalReport& report, std::ostream& out, bool json);

void add_eval_command(CLI::App& app);

}  // namespace kiln::cli

using kiln::cli::add_eval_command;
