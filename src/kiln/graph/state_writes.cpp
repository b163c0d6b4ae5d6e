// The state a compiled step writes in place, made visible to everyone else who keeps something
// derived from it: each launch's state writes are counted on their storage after it runs
// (Storage::writes), and each weight's bf16 copy (passes/bf16_weight_copies.cpp) is cast afresh
// at a step's start when the counts show that the weight or the copy was written since this
// graph's update wrote both: by a checkpoint load, a state restore, another graph, an eager
// update, or anything untracked (numpy).
#include "kiln/core/dtype.h"
#include "kiln/graph/detail/executor_internal.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph {

void Executable::find_state_writes() {
  state_writes_.clear();
  bf16_copies_.clear();
  std::vector<size_t> launch_of(graph_.num_nodes(), launches_.size());
  for (size_t li = 0; li < launches_.size(); ++li) {
    const Node& node = graph_.node(launches_[li].node);
    launch_of[size_t(launches_[li].node)] = li;
    const uint32_t bits = mutated_inputs(node);
    for (size_t i = 0; i < node.inputs.size() && i < 32; ++i) {
      const ValueId v = node.inputs[i];
      if ((bits >> i & 1u) && v != kNoValue && graph_.value(v).kind == ValueKind::state) {
        state_writes_.push_back({li, bound_[size_t(v)]});
      }
    }
  }
  for (const passes::Bf16WeightCopy& c : passes::bf16_weight_copies(graph_)) {
    bf16_copies_.push_back(
        {bound_[size_t(c.weight)], bound_[size_t(c.copy)], launch_of[size_t(c.update)]});
  }
}

void Executable::note_state_writes(size_t begin, size_t end) {
  for (const StateWrite& w : state_writes_) {
    if (w.launch >= begin && w.launch < end) w.tensor.mark_written();
  }
  for (Bf16Copy& c : bf16_copies_) {
    if (c.update_launch < begin || c.update_launch >= end) continue;
    c.weight_writes = c.weight.impl()->storage->writes();
    c.copy_writes = c.copy.impl()->storage->writes();
  }
}

void Executable::refresh_bf16_copies() {
  for (Bf16Copy& c : bf16_copies_) {
    const uint64_t weight_writes = c.weight.impl()->storage->writes();
    const uint64_t copy_writes = c.copy.impl()->storage->writes();
    if (weight_writes != Storage::kUntracked && weight_writes == c.weight_writes &&
        copy_writes == c.copy_writes) {
      continue;
    }
    // Both dense in the weight's layout (the pass made the copy so): one flat pass.
    convert(c.weight.raw_data(), DType::f32, c.copy.raw_data(), DType::bf16, c.weight.numel());
    c.weight_writes = weight_writes;
    c.copy_writes = copy_writes;
    ++bf16_copy_refreshes_;
  }
}

}  // namespace kiln::graph
