// Scheduling of data parallelism's gradient buckets: each all_reduce_bucket_start moves to right
// after the node that produces the last of its gradients, so the bucket's all-reduce runs on the
// communicator's thread while the rest of the backward computes. The waits stay where the trace
// put them (after the backward, in bucket order), just before the updates that read them.
// Every rank compiles the same graph, so every rank starts the buckets in the same order.
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {

int schedule_collectives(Graph& graph) {
  const std::vector<NodeId> order = graph.schedule();
  std::vector<int> pos(graph.num_nodes(), -1);
  for (size_t i = 0; i < order.size(); ++i) pos[size_t(order[i])] = int(i);
  // Starts to place right after the node at each position, in their original order.
  std::vector<std::vector<NodeId>> after(order.size());
  std::vector<bool> moved(graph.num_nodes(), false);
  int count = 0;
  int previous_start = -1;  // starts keep their relative order (every rank's must match)
  for (size_t i = 0; i < order.size(); ++i) {
    const NodeId n = order[i];
    const Node& node = graph.node(n);
    if (!(node.type == NodeType::op && node.op == ops::OpKind::all_reduce_bucket_start)) continue;
    int ready = previous_start;
    for (ValueId v : node.inputs) {
      if (v == kNoValue) continue;
      const NodeId producer = graph.value(v).producer;
      if (producer >= 0) ready = std::max(ready, pos[size_t(producer)]);
    }
    // An earlier collective (another kind) keeps its place before this one.
    for (size_t j = size_t(std::max(ready, 0)); j < i; ++j) {
      const Node& other = graph.node(order[j]);
      if (is_collective(other) && other.op != ops::OpKind::all_reduce_bucket_start) {
        ready = std::max(ready, int(j));
      }
    }
    previous_start = ready;
    if (ready < 0 || ready + 1 >= int(i)) {
      previous_start = int(i);
      continue;
    }
    after[size_t(ready)].push_back(n);
    moved[size_t(n)] = true;
    ++count;
  }
  if (count == 0) return 0;
  std::vector<NodeId> next;
  next.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    if (!moved[size_t(order[i])]) next.push_back(order[i]);
    for (NodeId s : after[i]) next.push_back(s);
  }
  graph.reorder(next);
  return count;
}

}  // namespace kiln::graph::passes
