#pragma once
// The tracer: while one is active on this thread, every op called on a traced tensor is recorded
// into its Graph instead of being run (ops::call hands it to the tracer's slot of the dispatch
// chain, ops/dispatch_chain.h, which every Tracer installs).
//
// Real tensors that reach a traced op are captured BY REFERENCE: the graph keeps a handle on the
// tensor itself, so kernels read the current parameter values and in-place ops (optimizer
// updates, BatchNorm running statistics) write the real tensors, which eager code then sees.
// Tensors registered with bind_state() are marked traced for the duration of the trace, so even
// ops whose inputs are all state (say, a weight computed from two parameters) are recorded.
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/graph/ir.h"

namespace kiln::graph {

// Installs the tracer into the dispatch chain (idempotent, thread-safe; Tracer's constructor
// calls it).
void install_tracer();

class Tracer {
 public:
  explicit Tracer(Graph& graph);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // A graph input (fed every step): returns the symbolic tensor to call the network with.
  Tensor input(const ops::TensorMeta& meta, std::string name);
  // Binds real tensors as step state (parameters, buffers, optimizer state).
  void bind_state(const std::vector<std::pair<std::string, Tensor>>& tensors);
  // The value a tensor stands for; a real tensor is captured (state) on first use.
  ValueId value_of(const Tensor& t);
  // A symbolic tensor standing for value v (shape, dtype and layout of v).
  Tensor tensor_of(ValueId v) const;
  // Makes `t` a graph output.
  void add_output(const Tensor& t);
  // Ends tracing: restores the tensors bind_state() marked, and reclassifies captured tensors
  // that nothing outside the graph still references as constants (they can be folded).
  void finish();

  Graph& graph() { return graph_; }
  // The tracer active on this thread, or null.
  static Tracer* current();

  // Used by the dispatcher hook: records one op and returns its symbolic outputs.
  std::vector<Tensor> record(ops::OpKind kind, std::span<const Tensor> inputs,
                             const ops::Attrs& attrs, std::span<const ops::TensorMeta> outputs);

 private:
  struct Marked {
    std::shared_ptr<TensorImpl> impl;
    int64_t old_value;
    const void* old_graph;
  };
  Graph& graph_;
  Tracer* previous_;
  bool finished_ = false;
  std::unordered_map<const TensorImpl*, ValueId> captured_;
  std::vector<Marked> marked_;
};

}  // namespace kiln::graph
