#include "kiln/profile/graph_phases.h"

#include <algorithm>
#include <map>

#include "kiln/ops/op.h"

namespace kiln::profile {
namespace {

using train::StepPhase;

// Whether the node writes step state (a parameter, optimizer state) in place.
bool writes_state(const graph::Graph& g, const graph::Node& node) {
  const uint32_t mutated = graph::mutated_inputs(node);
  for (size_t i = 0; i < node.inputs.size() && i < 32; ++i) {
    const graph::ValueId v = node.inputs[i];
    if ((mutated >> i & 1u) && v != graph::kNoValue && g.value(v).kind == graph::ValueKind::state) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<StepPhase> node_phases(const graph::Graph& g) {
  std::vector<StepPhase> phase(g.num_nodes(), StepPhase::graph_step);
  if (g.outputs().empty()) return phase;
  // The loss's producers, transitively: the forward pass (batch norm's running statistics
  // included, which it writes in place).
  std::vector<bool> forward(g.num_nodes(), false);
  std::vector<graph::ValueId> pending = {g.outputs().front()};
  while (!pending.empty()) {
    const graph::ValueId v = pending.back();
    pending.pop_back();
    if (v == graph::kNoValue) continue;
    const graph::NodeId n = g.value(v).producer;
    if (n < 0 || forward[size_t(n)]) continue;
    forward[size_t(n)] = true;
    for (graph::ValueId in : g.node(n).inputs) pending.push_back(in);
  }
  for (graph::NodeId n = 0; n < graph::NodeId(g.num_nodes()); ++n) {
    const graph::Node& node = g.node(n);
    if (node.dead) continue;
    phase[size_t(n)] = forward[size_t(n)]           ? StepPhase::forward
                       : graph::is_collective(node) ? StepPhase::communication
                       : writes_state(g, node)      ? StepPhase::update
                                                    : StepPhase::backward;
  }
  return phase;
}

void split_graph_steps(Collection& c) {
  std::vector<const OpEvent*> launches;
  for (const OpEvent& e : c.ops) {
    if (c.signatures[e.signature].mode == "graph") launches.push_back(&e);
  }
  std::sort(launches.begin(), launches.end(),
            [](const OpEvent* a, const OpEvent* b) { return a->begin_ns < b->begin_ns; });
  std::vector<PhaseEvent> phases;
  phases.reserve(c.phases.size());
  for (const PhaseEvent& p : c.phases) {
    if (p.phase != StepPhase::graph_step) {
      phases.push_back(p);
      continue;
    }
    const auto first =
        std::lower_bound(launches.begin(), launches.end(), p.begin_ns,
                         [](const OpEvent* e, int64_t begin_ns) { return e->begin_ns < begin_ns; });
    auto last = first;
    while (last != launches.end() && (*last)->begin_ns < p.end_ns) ++last;
    // When batch slices run side by side (train/batch_split_step.h) the threads' launches
    // interleave, and another slice may be a phase ahead: the phases, drawn on the training
    // loop's thread (0), follow its own launches; where it launched none, the thread that
    // launched the most.
    std::map<uint32_t, int> per_thread;
    for (auto it = first; it != last; ++it) ++per_thread[(*it)->thread];
    uint32_t followed = 0;
    if (!per_thread.contains(0)) {
      int most = 0;
      for (const auto& [thread, count] : per_thread) {
        if (count > most) followed = thread, most = count;
      }
    }
    PhaseEvent current{StepPhase::graph_step, p.begin_ns, p.end_ns};
    for (auto it = first; it != last; ++it) {
      if ((*it)->thread != followed) continue;
      const StepPhase phase = c.signatures[(*it)->signature].phase;
      if (phase == StepPhase::graph_step || phase == current.phase) continue;
      if (current.phase != StepPhase::graph_step) {
        current.end_ns = (*it)->begin_ns;
        phases.push_back(current);
        current.begin_ns = (*it)->begin_ns;
      }
      current.phase = phase;  // the first known phase also takes the time before it
    }
    current.end_ns = p.end_ns;
    phases.push_back(current);
  }
  c.phases = std::move(phases);
}

}  // namespace kiln::profile
