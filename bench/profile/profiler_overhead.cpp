// What profiling costs: images/s of Model.train with the profiler collecting against without,
// in alternating blocks of steps (off, on, on, off, ...) so drift of the machine hits both.
//   kiln_profiler_overhead_bench <lenet|resnet20> <batch> <eager|graph> [steps] [rounds]
// Prints one JSON line: median images/s off and on, the overhead, and analyse()'s time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/core/context.h"
#include "kiln/core/random.h"
#include "kiln/data/dataset.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/momentum.h"
#include "kiln/profile/profiler.h"
#include "kiln/train/model.h"

using namespace kiln;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <lenet|resnet20> <batch> <eager|graph> [steps] [rounds]\n",
                 argv[0]);
    return 2;
  }
  const std::string name = argv[1];
  const int64_t batch = std::atoll(argv[2]);
  const bool graph = std::string(argv[3]) == "graph";
  const int64_t steps = argc > 4 ? std::atoll(argv[4]) : 20;
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 6;
  set_context({.mode = graph ? GRAPH_MODE : PYNATIVE_MODE});
  set_seed(1);
  const Shape image{1, 28, 28};  // the zoo's models take Fashion-MNIST's images
  Shape rows_shape{steps * batch};
  for (int64_t d : image) rows_shape.dims().push_back(d);
  std::vector<int32_t> labels(size_t(steps * batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % 10);
  Tensor images = Tensor::empty(rows_shape);
  Generator gen(3);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<float>()[i] = gen.uniform(-1.f, 1.f);
  data::Dataset ds =
      data::NumpySlicesDataset({images, Tensor::from_vector(labels, {steps * batch})},
                               {"data", "label"}, {.shuffle = false})
          .batch(batch, true);
  auto net = models::create(name);
  auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.01));
  train::Model model(net, loss, opt);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln-profiler-overhead-" + name)).string();

  auto block = [&](bool profiled) {
    std::unique_ptr<Profiler> profiler;
    if (profiled) profiler = std::make_unique<Profiler>(ProfilerOptions{.output_path = dir});
    auto t0 = std::chrono::steady_clock::now();
    model.train(1, ds);
    const double ips = double(steps * batch) / seconds_since(t0);
    return std::make_pair(ips, std::move(profiler));
  };
  block(false);  // warm-up: compilation, first touch of memory
  std::vector<double> off, on;
  std::unique_ptr<Profiler> last;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool profiled = (r + k) % 2 == 1;
      auto [ips, profiler] = block(profiled);
      (profiled ? on : off).push_back(ips);
      if (profiler) {
        profiler->stop();
        last = std::move(profiler);
      }
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  const std::string report = last->analyse();
  const double analyse_s = seconds_since(t0);
  const double off_ips = median(off), on_ips = median(on);
  std::printf(
      "{\"model\":\"%s\",\"mode\":\"%s\",\"batch\":%lld,\"steps_per_block\":%lld,\"rounds\":%d,"
      "\"images_per_sec_off\":%.1f,\"images_per_sec_on\":%.1f,\"overhead_percent\":%.2f,"
      "\"launches_per_block\":%zu,\"analyse_s\":%.3f,\"report\":\"%s\"}\n",
      name.c_str(), graph ? "graph" : "eager", (long long)batch, (long long)steps, rounds, off_ips,
      on_ips, 100.0 * (off_ips - on_ips) / off_ips, last->collection().ops.size(), analyse_s,
      report.c_str());
  return 0;
}
