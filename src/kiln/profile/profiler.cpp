#include "kiln/profile/profiler.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "kiln/comm/communicator.h"
#include "kiln/core/allocator.h"
#include "kiln/core/error.h"
#include "kiln/core/kernel_threads.h"
#include "kiln/core/threads.h"
#include "kiln/graph/dump.h"
#include "kiln/ops/dispatch_chain.h"
#include "kiln/ops/kernel_name.h"
#include "kiln/ops/machine_peaks.h"
#include "kiln/profile/graph_phases.h"
#include "kiln/profile/raw_files.h"
#include "kiln/profile/report.h"

namespace kiln {
namespace {

std::string describe_metas(std::span<const ops::TensorMeta> inputs,
                           std::span<const ops::TensorMeta> outputs) {
  std::string s;
  for (const ops::TensorMeta& m : inputs) {
    s += ops::describe_meta(m) + " ";
  }
  s += "->";
  for (const ops::TensorMeta& m : outputs) s += " " + ops::describe_meta(m);
  return s;
}

std::string layout_name(const ops::TensorMeta& m) {
  if (m.shape.rank() != 4) return "-";
  return m.layout == ops::Layout::channels_last ? "nhwc" : "nchw";
}

std::string describe_layouts(std::span<const ops::TensorMeta> inputs,
                             std::span<const ops::TensorMeta> outputs) {
  bool any_4d = false;
  std::string s;
  for (const ops::TensorMeta& m : inputs) {
    any_4d = any_4d || m.shape.rank() == 4;
    s += layout_name(m) + " ";
  }
  s += "->";
  for (const ops::TensorMeta& m : outputs) {
    any_4d = any_4d || m.shape.rank() == 4;
    s += " " + layout_name(m);
  }
  return any_4d ? s : std::string();
}

// A graph launch's layouts: as describe_layouts, with the activations the block-layout pass keeps
// in oneDNN's blocked nChw16c named so (the node's layout bits; its metas say channels last).
std::string describe_node_layouts(const graph::Graph& g, const graph::Node& node) {
  bool any_4d = false;
  auto token = [&](graph::ValueId v, bool blocked) {
    const ops::TensorMeta& m = g.value(v).meta;
    any_4d = any_4d || m.shape.rank() == 4;
    return blocked && m.shape.rank() == 4 ? std::string("nChw16c") : layout_name(m);
  };
  std::string s;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (node.inputs[i] != graph::kNoValue) {
      s += token(node.inputs[i], graph::input_is_nchw16c(node, int(i))) + " ";
    }
  }
  s += "->";
  for (size_t j = 0; j < node.outputs.size(); ++j) {
    if (node.outputs[j] != graph::kNoValue) {
      s += " " + token(node.outputs[j], graph::output_is_nchw16c(node, int(j)));
    }
  }
  return any_4d ? s : std::string();
}

uint64_t mix(uint64_t h, uint64_t v) {
  return (h ^ v) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
}

// An eager launch's signature key: the op, its input metas (a 4-D input's layout too), its
// attributes, the kernels that ran (interned names: their addresses) and its threads.
uint64_t eager_key(ops::OpKind kind, std::span<const Tensor> inputs, const ops::Attrs& attrs,
                   const ops::KernelNotes& notes, int threads) {
  uint64_t h = mix(0xcbf29ce484222325ull, uint64_t(kind));
  for (const Tensor& t : inputs) {
    h = mix(h, uint64_t(t.dtype()) + 0x100 * uint64_t(t.rank()));
    for (int64_t d : t.shape().dims()) h = mix(h, uint64_t(d));
    if (t.rank() == 4) h = mix(h, uint64_t(ops::meta_of(t).layout));
  }
  for (int i = 0; i < notes.count; ++i) h = mix(h, reinterpret_cast<uintptr_t>(notes.names[i]));
  return mix(mix(h, uint64_t(threads)), ops::hash_attrs(attrs));
}

// What a launch computes in: its first floating input's dtype, else its first output's.
std::string compute_dtype(std::span<const ops::TensorMeta> inputs,
                          std::span<const ops::TensorMeta> outputs) {
  for (const ops::TensorMeta& m : inputs) {
    if (is_floating(m.dtype)) return std::string(dtype_name(m.dtype));
  }
  if (!outputs.empty()) return std::string(dtype_name(outputs[0].dtype));
  return inputs.empty() ? "" : std::string(dtype_name(inputs[0].dtype));
}

// The static memory plan's buffers, each named after the node that writes it first.
std::vector<profile::PlanBuffer> plan_buffers(const graph::Executable& exe) {
  const graph::MemoryPlan& plan = exe.plan();
  const graph::Graph& g = exe.graph();
  std::vector<graph::NodeId> producer(g.num_values(), -1);
  for (graph::NodeId n = 0; n < graph::NodeId(g.num_nodes()); ++n) {
    for (graph::ValueId v : g.node(n).outputs) {
      if (v != graph::kNoValue) producer[size_t(v)] = n;
    }
  }
  std::vector<profile::PlanBuffer> out;
  for (const graph::MemoryPlan::Buffer& b : plan.buffers) {
    profile::PlanBuffer pb{.offset = b.offset, .bytes = b.bytes, .first = b.first, .last = b.last};
    if (!b.values.empty()) {
      const graph::ValueId v = b.values.front();
      const graph::Value& value = g.value(v);
      pb.holds = (producer[size_t(v)] >= 0 ? graph::node_label(g.node(producer[size_t(v)]))
                                           : std::string("input")) +
                 " " + ops::describe_meta(value.meta);
    }
    out.push_back(std::move(pb));
  }
  return out;
}

std::map<std::string, double> report_counts(const graph::CompileReport& r) {
  std::map<std::string, double> counts = {{"trace_ms", r.trace_ms},
                                          {"compile_ms", r.compile_ms},
                                          {"nodes_traced", double(r.nodes_traced)},
                                          {"nodes_compiled", double(r.nodes_compiled)},
                                          {"launches", double(r.launches)},
                                          {"folded", r.folded},
                                          {"simplified", r.simplified},
                                          {"cse_merged", r.cse_merged},
                                          {"dce_removed", r.dce_removed},
                                          {"arena_bytes", double(r.arena_bytes)},
                                          {"live_bytes_peak", double(r.live_bytes_peak)},
                                          {"unplanned_bytes", double(r.unplanned_bytes)},
                                          {"workspace_bytes", double(r.workspace_bytes)}};
  for (const graph::FusedNodeCount& fused : r.fused_nodes) {
    counts["fused_" + std::string(fused.name)] = fused.nodes;
  }
  return counts;
}

}  // namespace

namespace {

// One thread's launches and allocator events. Each thread appends to its own, under its own
// lock that only the merge at stop() ever contends: with one lock for all, batch slices and
// pipeline workers on a busy machine would queue behind a holder the scheduler took off its core.
struct ThreadEvents {
  std::mutex mutex;  // guards ops and allocations (the owner appends, end() merges)
  uint32_t thread = 0;
  std::vector<profile::OpEvent> ops;
  std::vector<profile::AllocationEvent> allocations;
  // The owner's own: its view of the shared signatures, read and written without a lock.
  std::unordered_map<uint64_t, uint32_t> eager_signatures;
  uint64_t last_graph = 0;
  uint32_t last_graph_base = 0;
  std::vector<bool> kernel_named;  // graph signatures whose kernels this thread looked up
};

// The calling thread's events for the collector of this generation.
struct ThreadSlot {
  uint64_t generation = 0;
  ThreadEvents* events = nullptr;
};
thread_local ThreadSlot t_slot;
std::atomic<uint64_t> g_generations{0};

}  // namespace

// Receives every observer's calls. Signatures, phases, steps, compiles and samples are shared
// (one lock, taken once per step or per new signature); launches and allocator events go to
// per-thread buffers (ThreadEvents).
class Profiler::Collector final : public train::StepTraceSink {
 public:
  Collector() : generation_(g_generations.fetch_add(1) + 1) {
    data_.rank = comm::rank();
    data_.ranks = comm::size();
  }

  // The collecting profiler's collector (null: none). An observer call already past this load
  // when the profiler stops still finishes: stop() before destroying the profiler, and stop
  // while no other thread runs ops, as analyse() after training does.
  static std::atomic<Collector*>& active() {
    static std::atomic<Collector*> collector{nullptr};
    return collector;
  }

  void begin() {
    events();  // the starting thread is thread 0 of the trace
    allocator::reset_peak();
    data_.start_ns = train::trace_clock_ns();
    sample_memory(data_.start_ns);
  }
  void end() {
    const int64_t now = train::trace_clock_ns();
    sample_memory(now);
    std::vector<ThreadEvents*> threads;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& t : threads_) threads.push_back(t.get());
    }
    std::vector<profile::OpEvent> ops;
    std::vector<profile::AllocationEvent> allocations;
    for (ThreadEvents* t : threads) {
      std::lock_guard<std::mutex> lock(t->mutex);
      ops.insert(ops.end(), t->ops.begin(), t->ops.end());
      allocations.insert(allocations.end(), t->allocations.begin(), t->allocations.end());
      t->ops.clear();
      t->allocations.clear();
    }
    auto by_time = [](const auto& a, const auto& b) { return a.begin_ns < b.begin_ns; };
    std::stable_sort(ops.begin(), ops.end(), by_time);
    std::stable_sort(allocations.begin(), allocations.end(),
                     [](const auto& a, const auto& b) { return a.at_ns < b.at_ns; });
    std::lock_guard<std::mutex> lock(mutex_);
    data_.ops.insert(data_.ops.end(), ops.begin(), ops.end());
    data_.allocations.insert(data_.allocations.end(), allocations.begin(), allocations.end());
    data_.stop_ns = now;
    profile::split_graph_steps(data_);
    data_.allocator_peak_bytes = allocator::stats().peak_bytes;
    data_.threads = int(threads_.size());
  }

  static void on_kernel(ops::OpKind kind, std::span<const Tensor> inputs,
                        std::span<const Tensor> outputs, const ops::Attrs& attrs, int64_t begin_ns,
                        int64_t end_ns) {
    Collector* self = active().load(std::memory_order_acquire);
    if (self) self->kernel(kind, inputs, outputs, attrs, begin_ns, end_ns);
  }
  static void on_launch(const graph::Executable& exe, size_t launch, int64_t begin_ns,
                        int64_t end_ns) {
    Collector* self = active().load(std::memory_order_acquire);
    if (self) self->graph_launch(exe, launch, begin_ns, end_ns);
  }
  static void on_allocation(int64_t bytes, int64_t in_use_bytes) {
    Collector* self = active().load(std::memory_order_acquire);
    if (self) self->allocation(bytes, in_use_bytes);
  }

  void phase(train::StepPhase phase, int64_t begin_ns, int64_t end_ns) override {
    std::lock_guard<std::mutex> lock(mutex_);
    data_.phases.push_back({phase, begin_ns, end_ns});
  }
  void step(int64_t global_step, int64_t batch_size, int64_t begin_ns, int64_t end_ns) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      data_.steps.push_back({global_step, batch_size, begin_ns, end_ns});
    }
    sample_memory(end_ns);
  }
  void compiled(const graph::Executable& exe, int compiles, const std::string& reason) override {
    CompileEvent event;
    event.at_ns = train::trace_clock_ns();
    event.compiles = compiles;
    event.graph = exe.id();
    event.buffers = plan_buffers(exe);
    {
      const std::vector<graph::NodeId>& schedule = exe.plan().schedule;
      std::unordered_map<graph::NodeId, int> position_of;
      for (size_t p = 0; p < schedule.size(); ++p) position_of[schedule[p]] = int(p);
      for (size_t i = 0; i < exe.num_launches(); ++i) {
        const graph::NodeId node = exe.launch_info(i).node;
        auto it = position_of.find(node);
        if (it != position_of.end()) event.node_positions.emplace_back(node, it->second);
      }
    }
    event.reason = reason;
    event.report = exe.report().str();
    event.counts = report_counts(exe.report());
    event.graph_text = exe.graph().str();
    event.graph_dot = graph::to_dot(exe.graph(), "compiled training step");
    if (const graph::Graph* traced = exe.traced_graph()) {
      event.traced_text = traced->str();
      event.traced_dot = graph::to_dot(*traced, "traced training step (before the passes)");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    data_.compiles.push_back(std::move(event));
  }
  void pipeline(const data::PipelineStats& stats, int64_t at_ns) override {
    std::lock_guard<std::mutex> lock(mutex_);
    data_.pipeline.push_back({at_ns, stats});
  }

  void amp_race(double mixed_ms, double fp32_ms) override {
    std::lock_guard<std::mutex> lock(mutex_);
    data_.amp_race = {{"bf16 where it pays", mixed_ms, mixed_ms <= fp32_ms},
                      {"float32", fp32_ms, fp32_ms < mixed_ms}};
  }

  void annotate(const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    data_.annotations[key] = value;
  }
  void add_comparisons(std::vector<profile::StepTiming> timings) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (profile::StepTiming& t : timings) data_.comparisons.push_back(std::move(t));
  }
  const profile::Collection& data() const { return data_; }

 private:
  using CompileEvent = profile::CompileEvent;

  // The calling thread's buffer, registered on its first event.
  ThreadEvents& events() {
    if (t_slot.generation == generation_) return *t_slot.events;
    std::lock_guard<std::mutex> lock(mutex_);
    threads_.push_back(std::make_unique<ThreadEvents>());
    threads_.back()->thread = uint32_t(threads_.size() - 1);
    t_slot = {generation_, threads_.back().get()};
    return *threads_.back();
  }

  void kernel(ops::OpKind kind, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
              const ops::Attrs& attrs, int64_t begin_ns, int64_t end_ns) {
    const ops::KernelNotes notes = ops::take_kernel_notes();
    const int threads = current_kernel_threads();  // the launch's team is still set
    const uint64_t key = eager_key(kind, inputs, attrs, notes, threads);
    ThreadEvents& te = events();
    auto it = te.eager_signatures.find(key);
    if (it == te.eager_signatures.end()) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto shared = eager_signatures_.find(key);
      if (shared == eager_signatures_.end()) {
        shared =
            eager_signatures_
                .emplace(key, add_eager_signature(kind, inputs, outputs, attrs, notes, threads))
                .first;
      }
      it = te.eager_signatures.emplace(key, shared->second).first;
    }
    std::lock_guard<std::mutex> lock(te.mutex);
    te.ops.push_back({it->second, te.thread, begin_ns, end_ns});
  }

  void allocation(int64_t bytes, int64_t in_use_bytes) {
    const int64_t now = train::trace_clock_ns();
    ThreadEvents& te = events();
    std::lock_guard<std::mutex> lock(te.mutex);
    te.allocations.push_back({now, te.thread, bytes, in_use_bytes});
  }

  // Under mutex_.
  uint32_t add_eager_signature(ops::OpKind kind, std::span<const Tensor> inputs,
                               std::span<const Tensor> outputs, const ops::Attrs& attrs,
                               const ops::KernelNotes& notes, int threads) {
    std::vector<ops::TensorMeta> in, out;
    for (const Tensor& t : inputs) in.push_back(ops::meta_of(t));
    for (const Tensor& t : outputs) out.push_back(ops::meta_of(t));
    const ops::OpDef& def = ops::op_def(kind);
    profile::OpSignature s;
    s.name = std::string(def.name);
    s.mode = "eager";
    s.shapes = describe_metas(in, out);
    s.layout = describe_layouts(in, out);
    s.launch = def.view ? "view" : "eager kernel";
    s.kernel = ops::join_kernel_notes(notes);
    if (s.kernel.empty()) s.kernel = def.view ? "view" : "kiln:" + s.name;
    s.dtype = compute_dtype(in, out);
    s.threads = threads;
    if (def.cost) {
      ops::Cost cost = def.cost(in, out, attrs);
      s.flops = cost.flops;
      s.bytes = cost.bytes;
    }
    data_.signatures.push_back(std::move(s));
    return uint32_t(data_.signatures.size() - 1);
  }

  // The first signature of `exe`'s launches, added on its first launch (under mutex_).
  uint32_t graph_signatures(const graph::Executable& exe) {
    auto [it, added] = graph_signatures_.emplace(exe.id(), uint32_t(data_.signatures.size()));
    if (!added) return it->second;
    const std::vector<train::StepPhase> phases = profile::node_phases(exe.graph());
    for (size_t i = 0; i < exe.num_launches(); ++i) {
      graph::LaunchInfo info = exe.launch_info(i);
      profile::OpSignature s;
      s.name = info.label;
      s.mode = "graph";
      s.shapes = describe_metas(info.inputs, info.outputs);
      s.layout = info.node >= 0 ? describe_node_layouts(exe.graph(), exe.graph().node(info.node))
                                : describe_layouts(info.inputs, info.outputs);
      s.launch = info.kernel;
      s.kernel = info.own_kernel;  // until a launch says which kernels ran
      s.dtype = compute_dtype(info.inputs, info.outputs);
      s.threads = exe.launch_threads(i);
      s.node = info.node;
      if (info.node >= 0) s.phase = phases[size_t(info.node)];
      s.graph = exe.id();
      s.flops = info.cost.flops;
      s.bytes = info.cost.bytes;
      data_.signatures.push_back(std::move(s));
    }
    return it->second;
  }

  void graph_launch(const graph::Executable& exe, size_t launch, int64_t begin_ns, int64_t end_ns) {
    ThreadEvents& te = events();
    if (exe.id() != te.last_graph) {
      std::lock_guard<std::mutex> lock(mutex_);
      te.last_graph_base = graph_signatures(exe);
      te.last_graph = exe.id();
    }
    const uint32_t signature = te.last_graph_base + uint32_t(launch);
    // A bound launch runs the same kernels every step: named after the first one's notes.
    if (te.kernel_named.size() <= signature) te.kernel_named.resize(signature + 1, false);
    if (!te.kernel_named[signature]) {
      te.kernel_named[signature] = true;
      const std::string noted = ops::join_kernel_notes(ops::take_kernel_notes());
      if (!noted.empty()) {
        std::lock_guard<std::mutex> lock(mutex_);
        data_.signatures[signature].kernel = noted;
      }
    }
    std::lock_guard<std::mutex> lock(te.mutex);
    te.ops.push_back({signature, te.thread, begin_ns, end_ns});
  }

  void sample_memory(int64_t at_ns) {
    const MemoryStats stats = allocator::stats();
    std::lock_guard<std::mutex> lock(mutex_);
    if (!data_.memory.empty() && data_.memory.back().in_use_bytes == stats.in_use_bytes &&
        data_.memory.back().peak_bytes == stats.peak_bytes) {
      return;
    }
    data_.memory.push_back({at_ns, stats.in_use_bytes, stats.peak_bytes});
  }

  const uint64_t generation_;
  std::mutex mutex_;
  profile::Collection data_;
  std::vector<std::unique_ptr<ThreadEvents>> threads_;  // in the order they first reported
  std::unordered_map<uint64_t, uint32_t> eager_signatures_;
  std::unordered_map<uint64_t, uint32_t> graph_signatures_;
};

Profiler::Profiler(ProfilerOptions options)
    : options_(std::move(options)), output_path_(options_.output_path) {
  if (output_path_.empty()) throw Error("Profiler: output_path is empty");
  if (comm::size() > 1) output_path_ += "/rank" + std::to_string(comm::rank());
  collector_ = std::make_unique<Collector>();
  if (options_.start_profile) start();
}

Profiler::~Profiler() {
  stop();
}

void Profiler::start() {
  if (running_) return;
  Collector* none = nullptr;
  if (!Collector::active().compare_exchange_strong(none, collector_.get())) {
    throw Error("Profiler: another profiler is collecting; stop it (analyse() or stop()) first");
  }
  collector_->begin();
  ops::dispatch_chain().set_kernel_observer(&Collector::on_kernel);
  graph::set_launch_observer(&Collector::on_launch);
  train::set_step_trace_sink(collector_.get());
  if (options_.profile_memory) allocator::set_allocation_observer(&Collector::on_allocation);
  running_ = true;
}

void Profiler::stop() {
  if (!running_) return;
  ops::dispatch_chain().set_kernel_observer(nullptr);
  graph::set_launch_observer(nullptr);
  train::set_step_trace_sink(nullptr);
  allocator::set_allocation_observer(nullptr);
  Collector::active().store(nullptr);
  collector_->end();
  running_ = false;
}

std::string Profiler::analyse() {
  stop();
  // Every rank measuring at once would share the cores and cache low figures: a job of several
  // ranks shows the peaks only when `kiln info --peaks` cached them before.
  // The process's thread budget, and one thread when some launch ran on one (most small ones):
  // each launch is held against the peaks of its own team where they are known.
  std::vector<ops::MachinePeaks> peaks;
  if (options_.machine_peaks) {
    std::vector<int> counts{num_threads()};
    for (const profile::OpSignature& s : collector_->data().signatures) {
      if (s.threads == 1 && counts[0] > 1) {
        counts.push_back(1);
        break;
      }
    }
    for (int threads : counts) {
      std::optional<ops::MachinePeaks> p =
          comm::size() == 1 ? ops::machine_peaks(threads) : ops::cached_machine_peaks(threads);
      if (p) peaks.push_back(*p);
    }
  }
  profile::write_raw_files(collector_->data(), output_path_, peaks);
  return profile::write_report(output_path_);
}

void Profiler::add_step_comparison(std::vector<profile::StepTiming> timings) {
  collector_->add_comparisons(std::move(timings));
}

void Profiler::annotate(const std::string& key, const std::string& value) {
  collector_->annotate(key, value);
}

const profile::Collection& Profiler::collection() const {
  return collector_->data();
}

}  // namespace kiln
