// Training-step throughput of one model in one mode, for side-by-side runs:
//   kiln_graph_step_bench <model> <batch> <eager|graph> <fusion on|off> [steps]
//                         [--amp-level O0|O1|O2|O3] [--amp-strict] [--micro-batches N]
//                         [--eager-split]
// <model>: any image model of the zoo (models::model_names()), fed 1x28x28 images.
// Prints one JSON line: images_per_sec, step_ms, compile_ms, plan peak, allocator peak, peak RSS,
// and step RSS: how far the process's peak RSS rose above its RSS just before the first step
// (model, parameters, optimizer state, data and libraries already resident, in both modes).
// Run each configuration in its own process so the peak-memory numbers are its own.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>

#include "kiln/amp/autocast.h"
#include "kiln/autograd/tape.h"
#include "kiln/core/allocator.h"
#include "kiln/core/random.h"
#include "kiln/core/threads.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/ops/dispatch.h"
#include "kiln/optim/momentum.h"
#include "kiln/train/batch_split_step.h"
#include "kiln/train/compiled_step.h"

using namespace kiln;

namespace {
// Eager per-op times (KILN_EAGER_PROFILE=1), to compare with KILN_GRAPH_PROFILE's.
double g_op_ns[ops::kNumOps];
void on_kernel(ops::OpKind k, std::span<const Tensor>, std::span<const Tensor>, const ops::Attrs&,
               int64_t b, int64_t e) {
  g_op_ns[size_t(k)] += double(e - b);
}
// Resident set size now, in MiB (VmRSS of /proc/self/status).
double current_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  }
  return 0.0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s <model> <batch> <eager|graph> <on|off> [steps]\n", argv[0]);
    return 2;
  }
  std::string model = argv[1];
  int64_t batch = std::atoll(argv[2]);
  bool graph_mode = std::string(argv[3]) == "graph";
  bool fusion = std::string(argv[4]) == "on";
  int steps = argc > 5 && argv[5][0] != '-' ? std::atoi(argv[5]) : 30;
  amp::AmpConfig amp_config;
  int micro_batches = 1;
  for (int i = 5; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--amp-level") amp_config.level = amp::parse_level(argv[i + 1]);
    if (std::string(argv[i]) == "--micro-batches") micro_batches = std::atoi(argv[i + 1]);
  }
  for (int i = 5; i < argc; ++i) {
    if (std::string(argv[i]) == "--amp-strict") amp_config.strict = true;
  }
  set_seed(1);
  auto net = models::create(model);
  nn::SoftmaxCrossEntropyWithLogits loss(true, "mean");
  optim::Momentum opt(net->trainable_params(), optim::constant_lr(0.01), {.momentum = 0.9});
  Tensor x = Tensor::empty({batch, 1, 28, 28});
  {
    auto* p = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = default_generator().uniform(-1.f, 1.f);
  }
  std::vector<int32_t> lv(static_cast<size_t>(batch));
  for (auto& v : lv) v = int32_t(default_generator().next_u64() % 10);
  Tensor y = Tensor::from_vector(lv, Shape{batch});
  std::vector<Tensor> params = net->trainable_params();

  graph::CompileOptions options;
  options.fusion = fusion;
  options.micro_batches = micro_batches;
  if (const char* dump_dir = std::getenv("KILN_DUMP_DIR")) options.dump_dir = dump_dir;
  train::CompiledTrainStep step(*net, loss, opt, options, amp_config);
  step.set_verbose(false);
  // --eager-split: eager mode splits the batch across the threads where the network allows
  // it, as train::Model does (without it, each kernel takes the threads its cost pays for).
  bool eager_split = false;
  for (int i = 5; i < argc; ++i) eager_split |= std::string(argv[i]) == "--eager-split";
  const int eager_slices =
      !graph_mode && eager_split && num_threads() > 1 &&
              train::eager_batch_split_refusal(*net, loss, {x}, y, num_threads()).empty()
          ? num_threads()
          : 1;
  auto run_step = [&]() -> float {
    if (graph_mode) return step.run(x, y).item<float>();
    opt.prepare_step();
    if (eager_slices > 1) {
      auto [l, grads] = train::eager_split_loss_and_gradients(*net, loss, params, amp_config, {x},
                                                              y, eager_slices);
      opt.apply(grads);
      opt.advance();
      return l.item<float>();
    }
    Tensor l;
    {
      std::optional<amp::AutocastScope> autocast;
      if (amp_config.level != amp::AmpLevel::O0) autocast.emplace(amp_config);
      l = loss(net->construct(x), y);
    }
    std::vector<Tensor> grads = autograd::grad(l, params);
    opt.apply(grads);
    opt.advance();
    return l.item<float>();
  };
  if (!graph_mode) autograd::install_tape();
  if (std::getenv("KILN_EAGER_PROFILE")) ops::dispatch_chain().set_kernel_observer(on_kernel);
  const double rss_before_steps = current_rss_mib();
  auto t0 = std::chrono::steady_clock::now();
  float first = run_step();
  double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < 3; ++i) run_step();
  // Per-op times count the measured steps only: the first one faults every buffer in, which
  // used to land on whichever op first wrote it (eager relu and add looked 4x slower).
  std::fill(std::begin(g_op_ns), std::end(g_op_ns), 0.0);
  allocator::reset_peak();
  float last = 0;
  t0 = std::chrono::steady_clock::now();
  std::clock_t c0 = std::clock();
  for (int i = 0; i < steps; ++i) last = run_step();
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // Process CPU time: on a busy machine it still says how much work a step is (all threads).
  double cpu_ms = double(std::clock() - c0) * 1000.0 / CLOCKS_PER_SEC;
  MemoryStats st = allocator::stats();
  const double peak_rss = peak_rss_mb();
  double compile_ms = graph_mode ? step.report().compile_ms + step.report().trace_ms : 0;
  int64_t arena = graph_mode ? step.report().arena_bytes : 0;
  std::printf(
      "{\"model\":\"%s\",\"batch\":%lld,\"mode\":\"%s\",\"fusion\":%s,\"micro_batches\":%d,"
      "\"images_per_sec\":%.1f,"
      "\"step_ms\":%.3f,\"cpu_ms_per_step\":%.3f,\"first_step_ms\":%.1f,\"compile_ms\":%.1f,\"plan_"
      "peak_mib\":%.2f,"
      "\"alloc_peak_mib\":%.2f,\"peak_rss_mib\":%.2f,\"step_rss_mib\":%.2f,\"loss_first\":%.4f,"
      "\"loss_last\":%.4f}\n",
      model.c_str(), (long long)batch, graph_mode ? "graph" : "eager", fusion ? "true" : "false",
      graph_mode ? micro_batches : 1, double(batch) * steps / (ms / 1000.0), ms / steps,
      cpu_ms / steps, first_ms, compile_ms, double(arena) / 1048576.0,
      double(st.peak_bytes) / 1048576.0, peak_rss, peak_rss - rss_before_steps, first, last);
  if (ops::dispatch_chain().kernel_observer()) {
    for (size_t k = 0; k < ops::kNumOps; ++k) {
      if (g_op_ns[k] > 0) {
        std::fprintf(stderr, "  %.3f ms  %s\n", g_op_ns[k] / 1e6 / steps,
                     std::string(ops::op_name(ops::OpKind(k))).c_str());
      }
    }
  }
  if (graph_mode && std::getenv("KILN_BENCH_REPORT")) {
    std::fprintf(stderr, "%s\n", step.report().str().c_str());
    if (graph_mode && step.amp_fell_back_to_fp32()) {
      std::fprintf(stderr, "amp placement: the fp32 step was faster; trained in fp32\n");
    }
    for (const std::string& line : amp::describe_decisions(step.placement())) {
      std::fprintf(stderr, "amp placement: %s\n", line.c_str());
    }
  }
  return 0;
}
