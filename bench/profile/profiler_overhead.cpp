// What profiling costs: images/s of Model.train with the profiler collecting against without,
// in alternating blocks of steps (off, on, on, off, ...) so drift of the machine hits both.
//   kiln_profiler_overhead_bench <lenet|resnet20> <batch> <eager|graph> [steps] [rounds]
//                                [no-memory]
//   kiln_profiler_overhead_bench events    (what one launch and its allocator events cost)
// Prints one JSON line: median images/s off and on (per wall second and per CPU second of the
// process), the overhead, analyse()'s time and the load average.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/core/context.h"
#include "kiln/core/random.h"
#include "kiln/data/dataset.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/ops/functional.h"
#include "kiln/optim/momentum.h"
#include "kiln/profile/profiler.h"
#include "kiln/train/model.h"

using namespace kiln;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The process's CPU time (all threads): what profiling adds is work, which other processes on a
// shared machine cannot add to, unlike wall time.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

// What one launch costs the profiler, apart from any model: thread CPU nanoseconds per call of a
// one-element eager add (one kernel launch, its output allocated and released: one launch event
// and two allocator events) with the profiler collecting and without, alternating; medians.
// This thread's CPU clock leaves out the time other processes take.
int event_costs() {
  set_context({.mode = PYNATIVE_MODE});
  Tensor a = Tensor::ones({1});
  constexpr int kCalls = 100'000, kRounds = 7;
  auto ns_per_call = [&](bool profiled) {
    std::unique_ptr<Profiler> profiler;
    if (profiled) {
      profiler = std::make_unique<Profiler>(
          ProfilerOptions{.output_path = "unused", .machine_peaks = false});
    }
    const double t0 = thread_cpu_ns();
    for (int i = 0; i < kCalls; ++i) ops::add(a, a);
    return (thread_cpu_ns() - t0) / kCalls;
  };
  ns_per_call(false);  // warm-up
  std::vector<double> off, on;
  for (int r = 0; r < kRounds; ++r) {
    off.push_back(ns_per_call(false));
    on.push_back(ns_per_call(true));
  }
  double load[1] = {0};
  getloadavg(load, 1);
  std::printf(
      "{\"events\":\"one-element eager add\",\"calls\":%d,\"rounds\":%d,\"ns_per_call_off\":%.1f,"
      "\"ns_per_call_on\":%.1f,\"added_ns_per_launch\":%.1f,\"load_average\":%.2f}\n",
      kCalls, kRounds, median(off), median(on), median(on) - median(off), load[0]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "events") return event_costs();
  if (argc < 4) {
    std::fprintf(
        stderr,
        "usage: %s <lenet|resnet20> <batch> <eager|graph> [steps] [rounds] [no-memory] | events\n",
        argv[0]);
    return 2;
  }
  const std::string name = argv[1];
  const int64_t batch = std::atoll(argv[2]);
  const bool graph = std::string(argv[3]) == "graph";
  const int64_t steps = argc > 4 ? std::atoll(argv[4]) : 20;
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 6;
  // "no-memory": without the allocator's events (ProfilerOptions::profile_memory), to see their
  // share of the cost.
  const bool profile_memory = !(argc > 6 && std::string(argv[6]) == "no-memory");
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

  struct Block {
    double ips, cpu_ips;  // images per wall second, per CPU second
    std::unique_ptr<Profiler> profiler;
  };
  auto block = [&](bool profiled) {
    std::unique_ptr<Profiler> profiler;
    if (profiled) {
      profiler = std::make_unique<Profiler>(
          ProfilerOptions{.output_path = dir, .profile_memory = profile_memory});
    }
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    model.train(1, ds);
    const double images = double(steps * batch);
    return Block{images / seconds_since(t0), images / (cpu_seconds() - c0), std::move(profiler)};
  };
  block(false);  // warm-up: compilation, first touch of memory
  std::vector<double> off, on, cpu_off, cpu_on;
  std::unique_ptr<Profiler> last;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool profiled = (r + k) % 2 == 1;
      auto [ips, cpu_ips, profiler] = block(profiled);
      (profiled ? on : off).push_back(ips);
      (profiled ? cpu_on : cpu_off).push_back(cpu_ips);
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
  const double cpu_off_ips = median(cpu_off), cpu_on_ips = median(cpu_on);
  double load[1] = {0};
  getloadavg(load, 1);
  std::printf(
      "{\"model\":\"%s\",\"mode\":\"%s\",\"batch\":%lld,\"steps_per_block\":%lld,\"rounds\":%d,"
      "\"images_per_sec_off\":%.1f,\"images_per_sec_on\":%.1f,\"overhead_percent\":%.2f,"
      "\"images_per_cpu_sec_off\":%.1f,\"images_per_cpu_sec_on\":%.1f,"
      "\"cpu_overhead_percent\":%.2f,\"launches_per_block\":%zu,\"allocator_events\":%zu,"
      "\"analyse_s\":%.3f,\"load_average\":%.2f,\"report\":\"%s\"}\n",
      name.c_str(), graph ? "graph" : "eager", (long long)batch, (long long)steps, rounds, off_ips,
      on_ips, 100.0 * (off_ips - on_ips) / off_ips, cpu_off_ips, cpu_on_ips,
      100.0 * (cpu_off_ips - cpu_on_ips) / cpu_off_ips, last->collection().ops.size(),
      last->collection().allocations.size(), analyse_s, load[0], report.c_str());
  return 0;
}
