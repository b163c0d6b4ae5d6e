// One model's compiled training step, alone or under AUTO_PARALLEL, for side-by-side runs:
//   kiln_auto_parallel_bench <mlp4096|mlp|lenet|resnet20|gpt> [--batch B] [--steps N]
//                            [--memory-limit-mb MB] [--search MODE] [--op-times measured|estimated]
// Under mpirun the step runs as AUTO_PARALLEL over the job's ranks (every rank reads the whole
// batch); alone it runs in this process. Rank 0 prints one JSON line: images_per_sec (of the
// global batch), step_ms (median of the measured steps, after 5 warm-up steps), and under
// AUTO_PARALLEL the plan's predicted step_ms, compute and communication, and memory per rank.
// mlp4096 is 784-4096-4096-10 (its weights, gradients and momentum take 224 MiB replicated).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kiln/comm/communicator.h"
#include "kiln/core/context.h"
#include "kiln/core/parallel_context.h"
#include "kiln/core/random.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/basic.h"
#include "kiln/nn/container.h"
#include "kiln/nn/dense.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/momentum.h"
#include "kiln/parallel/semi_auto.h"
#include "kiln/train/compiled_step.h"

using namespace kiln;

namespace {

struct Options {
  std::string model = "mlp4096";
  int64_t batch = 64;
  int steps = 30;
  double memory_limit_mb = 0;
  std::string search = "dynamic_programming";
  std::string op_times = "measured";
};

std::shared_ptr<nn::Cell> make_model(const std::string& name, int64_t& channels, int64_t& side) {
  channels = name == "resnet20" ? 3 : 1;
  side = name == "resnet20" ? 32 : 28;
  if (name == "mlp4096") {
    auto net = std::make_shared<nn::SequentialCell>();
    net->append(std::make_shared<nn::Flatten>());
    net->append(std::make_shared<nn::Dense>(784, 4096));
    net->append(std::make_shared<nn::ReLU>());
    net->append(std::make_shared<nn::Dense>(4096, 4096));
    net->append(std::make_shared<nn::ReLU>());
    net->append(std::make_shared<nn::Dense>(4096, 10));
    return net;
  }
  // A language model's classes are its vocabulary: the bytes main() draws its tokens from.
  const int64_t classes = models::is_language_model(name) ? 256 : 10;
  return models::create(name, {.num_classes = classes,
                               .in_channels = channels,
                               .image_height = side,
                               .image_width = side,
                               .context_length = 64});
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--batch") {
      o.batch = std::atoll(next().c_str());
    } else if (a == "--steps") {
      o.steps = std::atoi(next().c_str());
    } else if (a == "--memory-limit-mb") {
      o.memory_limit_mb = std::atof(next().c_str());
    } else if (a == "--search") {
      o.search = next();
    } else if (a == "--op-times") {
      o.op_times = next();
    } else if (a[0] != '-') {
      o.model = a;
    } else {
      std::fprintf(stderr,
                   "usage: %s <mlp4096|mlp|lenet|resnet20|gpt> [--batch B] [--steps N] "
                   "[--memory-limit-mb MB] [--search MODE] [--op-times measured|estimated]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    comm::init();
    const bool sharded = comm::size() > 1;
    set_context({.mode = GRAPH_MODE, .enable_graph_kernel = true});
    if (sharded) {
      set_auto_parallel_context({.parallel_mode = ParallelMode::AUTO_PARALLEL,
                                 .device_num = comm::size(),
                                 .search_mode = o.search,
                                 .memory_limit_mb = o.memory_limit_mb,
                                 .op_times = o.op_times});
    }
    set_seed(5);
    int64_t channels = 1, side = 28;
    auto net = make_model(o.model, channels, side);
    const bool language = models::is_language_model(o.model);
    Generator gen(11);
    Tensor x, y;
    if (language) {
      std::vector<int32_t> tokens(size_t(o.batch * 64)), next(tokens.size());
      for (auto& t : tokens) t = int32_t(gen.next_u64() % 256);
      for (auto& t : next) t = int32_t(gen.next_u64() % 256);
      x = Tensor::from_vector(tokens, Shape({o.batch, 64}));
      y = Tensor::from_vector(next, Shape({o.batch, 64}));
    } else {
      x = Tensor::empty({o.batch, channels, side, side});
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = gen.uniform(0.f, 1.f);
      std::vector<int32_t> labels(size_t(o.batch));
      for (auto& l : labels) l = int32_t(gen.next_u64() % 10);
      y = Tensor::from_vector(labels, Shape({o.batch}));
    }
    nn::SoftmaxCrossEntropyWithLogits loss(true, "mean");
    optim::Momentum opt(net->trainable_params(), optim::constant_lr(0.01),
                        optim::MomentumOptions{.momentum = 0.9});
    train::CompiledTrainStep step(*net, loss, opt, graph::CompileOptions{});
    step.set_verbose(false);
    for (int i = 0; i < 5; ++i) step.run(x, y);
    std::vector<double> ms;
    for (int i = 0; i < o.steps; ++i) {
      if (sharded) comm::barrier();
      const auto start = std::chrono::steady_clock::now();
      step.run(x, y).item<float>();
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    if (comm::rank() != 0) return 0;
    std::printf(
        "{\"model\":\"%s\",\"ranks\":%d,\"batch\":%lld,\"memory_limit_mb\":%g,"
        "\"images_per_sec\":%.1f,\"step_ms\":%.3f",
        o.model.c_str(), comm::size(), static_cast<long long>(o.batch), o.memory_limit_mb,
        double(o.batch) * 1e3 / median, median);
    if (const auto& p = step.predicted_step()) {
      std::printf(
          ",\"predicted_step_ms\":%.3f,\"predicted_compute_ms\":%.3f,"
          "\"predicted_communication_ms\":%.3f,\"predicted_memory_mib\":%.2f",
          p->seconds() * 1e3, p->compute_s * 1e3, p->communication_s * 1e3,
          p->memory_bytes() / double(1 << 20));
    }
    std::printf("}\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_auto_parallel_bench: %s\n", e.what());
    return 2;
  }
}
