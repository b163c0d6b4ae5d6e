// At scale, on paper: how a training step's speed would grow from 1 to 128 cores under each
// threading strategy, from the op table's costs of its compiled launches and
// core/kernel_threads.h's cost model (one thread's flops and bytes per second, the memory
// bandwidth per core, the fork/join cost measured here).
//
//   kiln_thread_model_bench <lenet|resnet20|mlp> <batch> [--measured-1 MS] [--measured-2 MS]
//                           [--bandwidth-per-core GBPS] [--fork-join-us US]
//
// per kernel:  each launch of the whole-batch step on the threads its cost pays for (of N);
// batch split: N slices of batch/N side by side, each launch on one thread, then the slices'
//              gradients summed on N threads and one fork/join, and a meeting of the slices
//              (costed as a fork/join) wherever a BatchNorm combines their statistics: twice per
//              BatchNorm in training; for networks without dropout, and N <= batch.
// With --measured-1 the model's times are scaled so its 1-core step equals the measured one
// (the model's absolute throughput is coarse, its ratios are what it is for); --measured-2 is
// printed beside the 2-core prediction. Prints a markdown table.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/kernel_threads.h"
#include "kiln/core/random.h"
#include "kiln/core/threads.h"
#include "kiln/graph/executor.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/momentum.h"
#include "kiln/train/batch_split_step.h"
#include "kiln/train/compiled_step.h"

using namespace kiln;

namespace {

std::vector<KernelWork> launch_costs(const graph::Executable& exe) {
  std::vector<KernelWork> launches;
  for (size_t i = 0; i < exe.num_launches(); ++i) {
    const ops::Cost c = exe.launch_info(i).cost;
    launches.push_back({.flops = c.flops, .bytes = c.bytes});
  }
  return launches;
}

double per_kernel_seconds(const std::vector<KernelWork>& launches, int cores,
                          const ThreadCostModel& m) {
  double s = 0;
  for (const KernelWork& w : launches) s += m.seconds(w, threads_for(w, cores, m));
  return s;
}

// One model and batch: its whole-batch step and, per slice count, its batch-split step.
struct Step {
  std::shared_ptr<nn::Cell> net;
  nn::SoftmaxCrossEntropyWithLogits loss{true, "mean"};
  std::unique_ptr<optim::Momentum> opt;
  Tensor x, y;
  std::vector<KernelWork> whole;
  std::string refusal;  // why it cannot split (empty: it can)

  Step(const std::string& model, int64_t batch) {
    set_seed(1);
    net = models::create(model);
    opt = std::make_unique<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.01),
                                            optim::MomentumOptions{.momentum = 0.9});
    x = Tensor::zeros({batch, 1, 28, 28});
    y = Tensor::zeros({batch}, DType::i32);
    train::CompiledTrainStep step(*net, loss, *opt, {.fusion = true});
    step.set_verbose(false);
    step.force_thread_strategy(train::ThreadStrategy::per_kernel);
    step.run(x, y);
    whole = launch_costs(step.executable());
    refusal = train::graph_batch_split_refusal(*net, loss, {x}, y, 2);
  }
  // Seconds of the batch-split step on `cores` cores: every slice at once, each on one core
  // with its share of the memory system, meeting the others at each BatchNorm (forward and
  // backward); then the update (summing the slices' gradients) per kernel on all cores; one
  // fork/join.
  double split_seconds(int cores, const ThreadCostModel& m) {
    train::BatchSplitStep split(*net, loss, *opt, {.fusion = true}, {}, {x}, y, cores);
    ThreadCostModel alone = m;
    alone.bytes_per_second = std::min(m.bytes_per_second, m.bandwidth_per_second / cores);
    alone.bandwidth_per_second = alone.bytes_per_second;
    double s = 0;
    for (const KernelWork& w : launch_costs(split.slice_step(0))) s += alone.seconds(w, 1);
    const double meetings = 2.0 * split.shared_statistics() * m.fork_join(cores);
    return s + meetings + per_kernel_seconds(launch_costs(split.update()), cores, m) +
           m.fork_join(cores);
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s <lenet|resnet20|mlp> <batch> [--measured-1 MS] "
                 "[--measured-2 MS] [--bandwidth-per-core GBPS] [--fork-join-us US]\n",
                 argv[0]);
    return 2;
  }
  const std::string model = argv[1];
  const int64_t batch = std::atoll(argv[2]);
  double measured_1 = 0, measured_2 = 0, bandwidth_per_core = 4e9, fork_join = -1;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const double v = std::atof(argv[i + 1]);
    if (flag == "--measured-1") measured_1 = v * 1e-3;
    if (flag == "--measured-2") measured_2 = v * 1e-3;
    if (flag == "--bandwidth-per-core") bandwidth_per_core = v * 1e9;
    if (flag == "--fork-join-us") fork_join = v * 1e-6;
  }
  set_num_threads(1);  // only the costs are read here; nothing is timed
  ThreadCostModel base = machine_thread_model();
  if (fork_join >= 0) base.fork_join_seconds = fork_join;
  Step step(model, batch);
  const double predicted_1 = per_kernel_seconds(step.whole, 1, base);
  const double scale = measured_1 > 0 ? measured_1 / predicted_1 : 1.0;
  std::printf(
      "%s b%lld: %zu launches, model 1-core step %.3f ms (x%.2f to the measured), "
      "fork/join %.1f us per doubling, %.1f GB/s per core, batch split: %s\n\n",
      model.c_str(), (long long)batch, step.whole.size(), predicted_1 * 1e3, scale,
      base.fork_join_seconds * 1e6, bandwidth_per_core / 1e9,
      step.refusal.empty() ? "allowed" : ("no (" + step.refusal + ")").c_str());
  std::printf(
      "| cores | per kernel img/s | speed-up | batch split img/s | speed-up | measured |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int cores = 1; cores <= 128; cores *= 2) {
    ThreadCostModel m = base;
    m.bandwidth_per_second = std::max(m.bytes_per_second, cores * bandwidth_per_core);
    const double pk = per_kernel_seconds(step.whole, cores, m) * scale;
    std::string split = "-", split_speedup = "-";
    if (step.refusal.empty() && cores > 1 && cores <= batch && batch % cores == 0) {
      const double s = step.split_seconds(cores, m) * scale;
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.0f", double(batch) / s);
      split = buf;
      std::snprintf(buf, sizeof(buf), "%.2fx", pk > 0 ? (predicted_1 * scale) / s : 0);
      split_speedup = buf;
    }
    std::string measured = "";
    if (cores == 1 && measured_1 > 0) measured = std::to_string(int(batch / measured_1)) + " img/s";
    if (cores == 2 && measured_2 > 0) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.0f img/s (%.2fx)", batch / measured_2,
                    measured_1 > 0 ? measured_1 / measured_2 : 0);
      measured = buf;
    }
    std::printf("| %d | %.0f | %.2fx | %s | %s | %s |\n", cores, double(batch) / pk,
                predicted_1 * scale / pk, split.c_str(), split_speedup.c_str(), measured.c_str());
  }
  return 0;
}
