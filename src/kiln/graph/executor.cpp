// Compiling a traced graph (run_passes, the memory plan, bind: each in its own file) and
// launching it: a step checks and takes its inputs, then walks the precomputed launches.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/core/kernel_threads.h"
#include "kiln/core/random.h"
#include "kiln/graph/detail/executor_internal.h"
#include "kiln/graph/dump.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/dnnl/context.h"
#include "kiln/ops/kernel_name.h"
#include "kiln/ops/kernels/copy.h"
#include "kiln/ops/kernels/pointwise.h"

namespace kiln::graph {

bool block_layout_pays() {
  return ops::dnnl_util::dnnl_nchw16c_native();
}

namespace {

std::atomic<uint64_t> g_executables_made{0};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Executable::Executable(Graph graph, const CompileOptions& options)
    : graph_(std::move(graph)), options_(options), id_(++g_executables_made) {
  auto t0 = std::chrono::steady_clock::now();
  graph_.verify();
  report_.nodes_traced = graph_.num_live_nodes();
  if (!options_.dump_dir.empty()) dump(graph_, options_.dump_dir, options_.dump_name + "_0_traced");
  if (options_.keep_traced_graph) traced_graph_ = std::make_shared<const Graph>(graph_);
  run_passes(graph_, options_, report_);  // pass_pipeline.cpp
  graph_.verify();
  if (!options_.dump_dir.empty()) {
    dump(graph_, options_.dump_dir, options_.dump_name + "_1_compiled");
  }
  report_.nodes_compiled = graph_.num_live_nodes();
  view_aliases_ = detail::probe_views(graph_);
  inputs_in_place_.assign(graph_.inputs().size(), options_.inputs_in_place);
  // Planned and bound again when a kernel cannot follow an input read in place, or when some
  // kernel's workspace found no gap: the plan then packs those workspaces, now that their sizes
  // are known, with the tensors (the others still go into gaps).
  std::vector<int64_t> workspace_bytes;
  for (;;) {
    plan_ = plan_memory(graph_, view_aliases_,
                        {.inplace = options_.inplace,
                         .inputs_in_place = inputs_in_place_,
                         .workspace_bytes = workspace_bytes,
                         .whole_step_lifetimes = options_.concurrent_groups > 1});
    if (options_.check_plan) check_memory_plan(plan_);
    bind();
    if (copy_inputs_kernels_cannot_follow()) continue;
    if (report_.workspace_outside_arena == 0 || !workspace_bytes.empty()) break;
    workspace_bytes.assign(plan_.schedule.size(), 0);
    for (const Launch& l : launches_) {
      if (!l.workspace.empty() && l.workspace.data() == workspace_->data()) {
        workspace_bytes[size_t(l.position)] = int64_t(l.workspace.size());
      }
    }
  }
  form_groups();
  report_.arena_bytes = plan_.arena_bytes;
  report_.live_bytes_peak = plan_.live_bytes_peak;
  report_.unplanned_bytes = plan_.total_bytes;
  report_.inplace_reuses = plan_.inplace_reuses;
  report_.inputs_in_place = int(std::count(inputs_in_place_.begin(), inputs_in_place_.end(), true));
  for (size_t v = 0; v < graph_.num_values(); ++v) {
    const Value& val = graph_.value(ValueId(v));
    if (val.kind == ValueKind::constant && val.tensor.defined()) {
      report_.constant_bytes += int64_t(val.tensor.nbytes());
    }
  }
  report_.compile_ms = ms_since(t0);
}

Executable::~Executable() {
  if (profile_ && steps_run_ > 1) std::fprintf(stderr, "%s", profile_summary().c_str());
}

std::string Executable::profile_summary() const {
  std::vector<std::pair<double, std::string>> rows;
  std::unordered_map<std::string, size_t> index;
  double total = 0;
  for (size_t i = 0; i < launches_.size() && i < launch_ns_.size(); ++i) {
    std::string label = node_label(graph_.node(launches_[i].node));
    auto [it, added] = index.emplace(label, rows.size());
    if (added) rows.emplace_back(0.0, label);
    rows[it->second].first += launch_ns_[i];
    total += launch_ns_[i];
  }
  std::sort(rows.rbegin(), rows.rend());
  std::ostringstream s;
  s.precision(3);
  // The first step is left out: it faults the arena's pages in.
  const double steps = double(steps_run_ - 1);
  s << std::fixed << "graph profile: " << steps_run_ - 1 << " steps after the first, "
    << total / 1e6 / steps << " ms/step in kernels\n";
  for (auto& [ns, label] : rows) {
    s << "  " << ns / 1e6 / steps << " ms  " << label << "\n";
  }
  const char* mode = std::getenv("KILN_GRAPH_PROFILE");
  if (mode != nullptr && std::string_view(mode) == "launches") {
    s << "per launch, in schedule order (inputs -> outputs):\n";
    for (size_t i = 0; i < launches_.size() && i < launch_ns_.size(); ++i) {
      const Node& node = graph_.node(launches_[i].node);
      s << "  " << launch_ns_[i] / 1e6 / steps << " ms  " << node_label(node);
      for (ValueId v : node.inputs) {
        if (v != kNoValue) s << " " << graph_.value(v).meta.shape.str();
      }
      s << " ->";
      for (ValueId v : node.outputs) s << " " << graph_.value(v).meta.shape.str();
      s << "\n";
    }
  }
  return s.str();
}

void Executable::take_inputs(std::span<const Tensor> inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& bound = bound_[size_t(graph_.inputs()[i])];
    if (!inputs_in_place_[i]) {
      bound.copy_from(inputs[i]);
      input_bytes_copied_ += int64_t(inputs[i].nbytes());
      continue;
    }
    // Kernels were built for the graph's strides and may assume the arena's 64-byte alignment:
    // a batch without both is staged in a buffer of our own first. So is a batch in the memory
    // of graph state (a parameter passed as input), which the step's updates change.
    const Tensor* from = &inputs[i];
    if (inputs[i].strides() != bound.strides() ||
        reinterpret_cast<uintptr_t>(inputs[i].raw_data()) % 64 != 0 ||
        is_state_memory(*inputs[i].impl()->storage)) {
      Tensor& stage = input_stages_[i];
      if (!stage.defined())
        stage = Tensor::empty_strided(bound.shape(), bound.strides(), bound.dtype());
      stage.copy_from(inputs[i]);
      input_bytes_copied_ += int64_t(inputs[i].nbytes());
      from = &stage;
    }
    Storage& slot = *input_slots_[i];
    const bool moved = from->raw_data() != slot.data();
    slot.borrow(from->raw_data(), from->impl()->storage);
    if (moved) {
      for (SpecialKernel* k : input_followers_[i]) k->inputs_moved();
    }
  }
}

bool Executable::is_state_memory(const Storage& storage) const {
  for (const auto& [v, data] : state_data_) {
    if (data == storage.data()) return true;
  }
  return false;
}

void Executable::release_inputs() {
  // The address stays, to notice when the next batch lands elsewhere; the batch is the caller's
  // again.
  for (const std::shared_ptr<Storage>& slot : input_slots_) {
    if (slot) slot->borrow(slot->data(), nullptr);
  }
}

bool Executable::accepts(std::span<const Tensor> inputs) const {
  if (inputs.size() != graph_.inputs().size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ops::TensorMeta& m = graph_.value(graph_.inputs()[i]).meta;
    if (inputs[i].shape() != m.shape || inputs[i].dtype() != m.dtype) return false;
  }
  return true;
}

void Executable::check_bindings() {
  if (arena_holder_->storage != arena_) {
    bind();  // another graph grew the shared arena
    return;
  }
  for (const auto& [v, data] : state_data_) {
    if (graph_.value(v).tensor.impl()->storage->data() != data) {
      bind();  // someone gave a parameter new memory: rebind (rare; costs no recompile)
      return;
    }
  }
}

void Executable::start(std::span<const Tensor> inputs) {
  if (inputs.size() != graph_.inputs().size()) {
    throw Error("compiled graph: expects " + std::to_string(graph_.inputs().size()) +
                " inputs, got " + std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    ValueId v = graph_.inputs()[i];
    const ops::TensorMeta& m = graph_.value(v).meta;
    if (inputs[i].shape() != m.shape || inputs[i].dtype() != m.dtype) {
      throw ShapeError("compiled graph: input " + std::to_string(i) + " (" + graph_.value(v).name +
                       ") is " + describe(inputs[i]) + " but the graph was compiled for " +
                       ops::describe_meta(m) + " (recompile)");
    }
  }
  updates_pending_ = false;
  check_bindings();
  refresh_bf16_copies();
  ops::NoGradGuard no_grad;
  take_inputs(inputs);
  ++steps_run_;
}

void Executable::launch(size_t begin, size_t end) {
  ops::NoGradGuard no_grad;
  const LaunchObserver observer = launch_observer();
  for (size_t li = begin; li < end; ++li) launch_one(li, observer);
}

void Executable::launch_one(size_t li, LaunchObserver observer, int threads) {
  // KILN_GRAPH_PROFILE and the profiler's observer share one pair of clock reads per launch.
  const bool timed = profile_ || observer != nullptr;
  Launch& l = launches_[li];
  if (observer != nullptr) ops::clear_kernel_notes();  // the observer takes this launch's
  const int64_t launch_begin = timed ? now_ns() : 0;
  KernelThreads team(threads > 0 ? threads : l.threads);
  switch (l.kind) {
    case Launch::Kind::kernel:
      if (l.reseed) {
        l.attrs.as<ops::DropoutAttrs>().seed = int64_t(default_generator().next_u64() >> 1);
      }
      l.kernel(l.in, l.out, l.attrs);
      break;
    case Launch::Kind::pointwise:
      ops::pointwise_kernel(l.op, l.in, l.out, l.attrs);
      break;
    case Launch::Kind::copy_reshape:
      ops::strided_copy(l.in[0], l.out[0]);
      break;
    case Launch::Kind::view_copy:
      l.out[0].copy_from(l.view(l.in[0], l.attrs));
      break;
    case Launch::Kind::special:
      if (options_.poison_workspaces && !l.workspace.empty()) {
        std::memset(l.workspace.data(), 0xFF, l.workspace.size());
      }
      l.special->run(l.in, l.out);
      break;
  }
  if (timed) {
    const int64_t launch_end = now_ns();
    if (profile_ && steps_run_ > 1) launch_ns_[li] += double(launch_end - launch_begin);
    if (observer != nullptr) observer(*this, li, launch_begin, launch_end);
  }
  for (size_t j = 0; j < l.out.size(); ++j) {
    if (l.out[j].defined() && l.out[j].raw_data() != l.out_data[j]) {
      throw Error(std::string(node_label(graph_.node(l.node))) +
                  ": the kernel replaced its output tensor instead of writing into it");
    }
  }
}

std::vector<Tensor> Executable::outputs() const {
  ops::NoGradGuard no_grad;
  std::vector<Tensor> result;
  for (ValueId v : graph_.outputs()) result.push_back(bound_[size_t(v)].clone());
  return result;
}

std::vector<Tensor> Executable::run(std::span<const Tensor> inputs) {
  start(inputs);
  launch(0, launches_.size());
  note_state_writes(0, launches_.size());
  std::vector<Tensor> result = outputs();
  release_inputs();
  return result;
}

std::vector<Tensor> Executable::run_in_arena(std::span<const Tensor> inputs) {
  start(inputs);
  launch(0, launches_.size());
  note_state_writes(0, launches_.size());
  std::vector<Tensor> result;
  for (ValueId v : graph_.outputs()) result.push_back(bound_[size_t(v)]);
  release_inputs();
  return result;
}

void Executable::begin_groups(std::span<const Tensor> inputs) {
  start(inputs);
}

void Executable::run_group(int group) {
  ops::NoGradGuard no_grad;
  const LaunchObserver observer = launch_observer();
  for (size_t li : groups_.at(size_t(group))) launch_one(li, observer, /*threads=*/1);
}

std::vector<Tensor> Executable::end_groups() {
  {
    ops::NoGradGuard no_grad;
    const LaunchObserver observer = launch_observer();
    for (size_t li : after_groups_) launch_one(li, observer);
  }
  note_state_writes(0, launches_.size());
  std::vector<Tensor> result = outputs();
  release_inputs();
  return result;
}

std::vector<Tensor> Executable::run_until_updates(std::span<const Tensor> inputs) {
  if (!options_.updates_last) {
    throw Error("compiled graph: run_until_updates() needs a graph compiled with updates_last");
  }
  start(inputs);
  launch(0, first_update_);
  note_state_writes(0, first_update_);
  updates_pending_ = true;
  return outputs();
}

void Executable::run_updates() {
  if (!updates_pending_) {
    throw Error("compiled graph: run_updates() without a run_until_updates() before it");
  }
  updates_pending_ = false;
  launch(first_update_, launches_.size());
  note_state_writes(first_update_, launches_.size());
  release_inputs();
}

}  // namespace kiln::graph
