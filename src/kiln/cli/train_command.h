#pragma once
// `kiln train`: trains a zoo model on a data set given by --data (an image folder, record files,
// Fashion-MNIST or MNIST; see data_spec.h; for the gpt language model a text file, text_data.h)
// with MindSpore-style monitor output. Classes, channels
// and input size come from the data; checkpoints carry them (trained_model.h).
// Every flag can also come from a YAML file (`--config FILE.yaml`) whose keys are the long flag
// names; a flag given on the command line wins over the file. Unknown keys or flags are errors
// naming them.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace CLI {
class App;
}

namespace kiln::cli {

struct TrainConfig {
  std::string model = "lenet";
  int64_t epochs = 5;
  int64_t steps = -1;  // stop after this many steps (-1: run all epochs)
  int64_t batch_size = 64;
  // graph (MindSpore's default mode, with graph-kernel fusion) | eager
  std::string mode = "graph";
  bool graph_kernel = true;
  int micro_batches = 1;  // graph mode: slices per step (Context::micro_batches)
  double lr = -1;         // -1: the optimizer's default (see default_lr)
  std::string optimizer = "momentum";
  std::string schedule = "cosine";  // cosine (with warm-up) | constant
  std::string amp_level = "O0";
  std::string amp_dtype = "bf16";  // bf16 | fp16: the low-precision type of O1..O3
  bool keep_batchnorm_fp32 = true;
  bool amp_strict = false;  // MindSpore's bf16 placement, whether or not it pays on this CPU
  std::string loss_scale;   // dynamic | fixed:N | none | "" (the level's default)
  int threads = 0;          // 0: every available core
  uint64_t seed = 1;
  std::string data_dir;    // Fashion-MNIST's folder when --data is not given
  std::string data;        // data_spec.h grammar; empty: fashion-mnist[:data_dir]
  std::string val;         // evaluation data; empty: the test split of (fashion-)mnist, else none
  std::string image_size;  // "HxW" or "S": resize to this; empty: the data's own size
  int channels = 0;        // 1 or 3: decode images so; 0: 1 when every image is grayscale, else 3
  std::string transforms;  // "random_crop:32:4,hflip,normalize:M:S"
  std::string ckpt_dir;
  std::string resume;
  bool json = false;
  int64_t print_every = 100;  // LossMonitor's per_print_times
  // Dataset sink mode: steps run back to back per sink, callbacks once per sink (-1: one sink
  // per epoch; 0: off, callbacks every step).
  int64_t sink_size = 0;
  std::string dump_graph;   // graph mode: write the IR before and after the passes there
  bool compile_log = true;  // graph mode: a stderr line per compiled graph
  // stand_alone | data_parallel (or data): under mpirun, DATA_PARALLEL over the job's ranks;
  // --batch-size is then per rank (MindSpore's meaning).
  // auto_parallel (or auto): AUTO_PARALLEL over the job's ranks in graph mode, each op split as
  // its search (--search-mode) decides within --memory-limit-mb per rank; --batch-size is the
  // global batch, which every rank reads whole.
  std::string parallel_mode = "stand_alone";
  double bucket_cap_mb = 25.0;  // data parallel: gradient bucket size
  std::string search_mode = "dynamic_programming";
  double memory_limit_mb = 0;         // 0: no limit
  std::string op_times = "measured";  // how the search knows each op's time (measured | estimated)
  // auto | direct | winograd: how 3x3 stride-1 convolutions run (Context::conv_algorithm)
  std::string conv_algorithm = "auto";
  int workers = 0;      // map workers of the data pipeline (0: one per core this process may use)
  int prefetch = 0;     // rows each pipeline queue holds (0: data::config's default, 16)
  std::string profile;  // profile the training there (trace.json, report.html, ...)
  // With --profile: time the step under the settings a user would try next (graph mode, fusion,
  // O0 / O2; profile/step_comparison.h) for the report's recommendations.
  bool profile_compare = true;
  int64_t context = 64;  // gpt: tokens per window (the position embedding's rows)
};

struct TrainReport {
  double images_per_sec = 0;  // steady state: steps after the first 10
  double test_accuracy = 0;   // on --val (or the training data when there is none); gpt: tokens
  double test_loss = 0;       // gpt: the mean per token, log(perplexity)
  double perplexity = 0;      // gpt: exp of the mean validation loss per token
  double tokens_per_sec = 0;  // gpt: images_per_sec (windows/s) x context
  double final_loss = 0;
  double wall_s = 0;
  double peak_rss_mb = 0;
  int64_t steps = 0;
  int64_t epochs = 0;
  int64_t skipped_steps = 0;  // steps whose update loss scaling dropped (overflow)
  int ranks = 1;              // data parallel: images_per_sec is the sum over ranks
};

void add_train_command(CLI::App& app);
// The same command with another action than run_train (tests check the parsed configuration).
void add_train_command(CLI::App& app, std::function<void(const TrainConfig&)> action);

// Runs a training job; monitor lines and the result go to `out`.
TrainReport run_train(const TrainConfig& config, std::ostream& out);

// The learning rate used when --lr is not given.
double default_lr(const std::string& optimizer);

// The optimizer --optimizer, --lr and --schedule name, over `params`, its schedule spanning
// `total_steps`.
std::shared_ptr<optim::Optimizer> make_optimizer(const TrainConfig& config,
                                                 std::vector<Tensor> params, int64_t total_steps);

}  // namespace kiln::cli

using kiln::cli::add_train_command;
