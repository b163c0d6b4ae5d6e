// Inter-op parallelism (CompileOptions::concurrent_groups): the launches split into groups of
// whole independent parts of the graph, balanced by cost, for threads to run side by side.
//
// Two launches belong to one part when they touch the same memory and one of them writes it
// (an output, or an input it mutates: a parameter, a velocity). Memory only read (the batch,
// the learning rate, constants) joins nothing. With every buffer kept for the whole step
// (PlanOptions::whole_step_lifetimes) distinct values never share memory, so parts that share
// no written memory cannot see each other's work, and each part keeps its schedule order.
#include <algorithm>
#include <numeric>

#include "kiln/core/kernel_threads.h"
#include "kiln/graph/detail/executor_internal.h"

namespace kiln::graph {
namespace {

// What a launch is assumed to cost beyond its work: the smallest kernels take 1–2 µs in a
// compiled step here (bench/README.md), and a part made of many tiny launches is not free.
constexpr double kLaunchSeconds = 1e-6;
// Bytes a part moves beyond which its data come from memory, not a core's cache (these CPUs
// have 1–2 MiB of L2 per core, and a part reads most of its tensors twice).
constexpr double kStreamingBytes = 4.0 * 1024 * 1024;

struct Components {
  std::vector<size_t> parent;
  explicit Components(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  size_t find(size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void join(size_t a, size_t b) { parent[find(a)] = find(b); }
};

}  // namespace

void Executable::form_groups() {
  groups_.assign(1, std::vector<size_t>(launches_.size()));
  std::iota(groups_[0].begin(), groups_[0].end(), size_t(0));
  after_groups_.clear();
  report_.concurrent_groups = 1;
  const int wanted = options_.concurrent_groups;
  if (wanted <= 1 || launches_.size() < 2) return;
  // Scratch placed in the arena's gaps or in one shared workspace, and dropout's draws from the
  // process's generator, assume one launch at a time.
  for (const Launch& l : launches_) {
    if (!l.workspace.empty() || l.reseed) return;
  }

  // Memory a launch touches: its buffer, or the value itself where it has none (state, inputs
  // read in place, constants), through the views that alias it.
  const size_t values = graph_.num_values();
  auto memory_of = [&](ValueId v) {
    const ValueId root = plan_.alias_of[size_t(v)];
    const int buffer = plan_.buffer_of[size_t(root)];
    return buffer == MemoryPlan::kNone ? size_t(root) : values + size_t(buffer);
  };
  const size_t memories = values + plan_.buffers.size();
  std::vector<bool> written(memories, false);
  auto for_each_touch = [&](const Node& node, auto&& touch) {
    const uint32_t mutated = mutated_inputs(node);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] != kNoValue) touch(memory_of(node.inputs[i]), (mutated >> i & 1u) != 0);
    }
    for (ValueId v : node.outputs) {
      if (v != kNoValue) touch(memory_of(v), true);
    }
  };
  for (const Launch& l : launches_) {
    for_each_touch(graph_.node(l.node), [&](size_t m, bool writes) {
      if (writes) written[m] = true;
    });
  }
  Components parts(launches_.size());
  std::vector<size_t> first_toucher(memories, SIZE_MAX);
  for (size_t li = 0; li < launches_.size(); ++li) {
    for_each_touch(graph_.node(launches_[li].node), [&](size_t m, bool) {
      if (!written[m]) return;
      if (first_toucher[m] == SIZE_MAX) {
        first_toucher[m] = li;
      } else {
        parts.join(li, first_toucher[m]);
      }
    });
  }

  // Each part's cost on one thread, then the longest first onto the least loaded group.
  std::vector<double> part_seconds(launches_.size(), 0.0), part_bytes(launches_.size(), 0.0);
  const ThreadCostModel& model = machine_thread_model();
  for (size_t li = 0; li < launches_.size(); ++li) {
    const ops::Cost cost = detail::node_cost(graph_, graph_.node(launches_[li].node));
    part_seconds[parts.find(li)] +=
        model.seconds({.flops = cost.flops, .bytes = cost.bytes}, 1) + kLaunchSeconds;
    part_bytes[parts.find(li)] += cost.bytes;
  }
  // A part over a group's share of what is left, whose data stream from memory, runs after the
  // groups instead, its kernels split across the threads as their costs allow: on it two
  // threads draw more bandwidth than one, and the other groups would wait for it. A part
  // that stays in a core's cache does better on one thread beside the others: LeNet's largest
  // update (1.5 MB moved) in a group makes its split step 3% faster than after the groups.
  double total = 0;
  std::vector<size_t> roots;
  for (size_t li = 0; li < launches_.size(); ++li) {
    if (parts.find(li) != li) continue;
    roots.push_back(li);
    total += part_seconds[li];
  }
  std::stable_sort(roots.begin(), roots.end(),
                   [&](size_t a, size_t b) { return part_seconds[a] > part_seconds[b]; });
  constexpr size_t kAfter = SIZE_MAX;
  std::vector<size_t> group_of(launches_.size(), kAfter);
  std::vector<size_t> grouped;
  for (size_t root : roots) {
    if (part_seconds[root] > total / wanted && part_bytes[root] > kStreamingBytes) {
      total -= part_seconds[root];
    } else {
      grouped.push_back(root);
    }
  }
  roots = std::move(grouped);
  if (roots.size() < 2) return;
  const size_t groups = std::min(roots.size(), size_t(wanted));
  std::vector<double> load(groups, 0.0);
  for (size_t root : roots) {
    const size_t g = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    load[g] += part_seconds[root];
    group_of[root] = g;
  }
  groups_.assign(groups, {});
  for (size_t li = 0; li < launches_.size(); ++li) {
    const size_t g = group_of[parts.find(li)];
    (g == kAfter ? after_groups_ : groups_[g]).push_back(li);
  }
  report_.concurrent_groups = int(groups);
}

}  // namespace kiln::graph
