#include "kiln/graph/tracer.h"

#include <string>

#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::graph {
namespace {

thread_local Tracer* t_current = nullptr;

std::vector<Tensor> trace_hook(ops::OpKind kind, std::span<const Tensor> inputs,
                               const ops::Attrs& attrs, std::span<const ops::TensorMeta> outputs) {
  Tracer* tracer = Tracer::current();
  if (!tracer) {
    throw Error(std::string(ops::op_name(kind)) +
                ": called on a traced tensor outside the trace that created it");
  }
  return tracer->record(kind, inputs, attrs, outputs);
}

}  // namespace

void install_tracer() {
  ops::dispatch_chain().set_tracer(trace_hook);
}

Tracer* Tracer::current() {
  return t_current;
}

Tracer::Tracer(Graph& graph) : graph_(graph), previous_(t_current) {
  if (previous_) throw Error("graph tracer: a trace is already active on this thread");
  install_tracer();
  t_current = this;
}

Tracer::~Tracer() {
  if (!finished_) {
    try {
      finish();
    } catch (...) {
    }
  }
  t_current = previous_;
}

Tensor Tracer::input(const ops::TensorMeta& meta, std::string name) {
  ValueId v = graph_.add_value(meta, ValueKind::input, std::move(name));
  graph_.inputs().push_back(v);
  return tensor_of(v);
}

void Tracer::bind_state(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  for (const auto& [name, t] : tensors) {
    if (!t.defined() || t.is_traced()) continue;
    ValueId v = value_of(t);
    if (graph_.value(v).name.empty()) graph_.value(v).name = name;
    TensorImpl* impl = t.impl();
    marked_.push_back({t.impl_ptr(), impl->traced_value, impl->trace_graph});
    impl->traced_value = v;
    impl->trace_graph = &graph_;
  }
}

ValueId Tracer::value_of(const Tensor& t) {
  if (!t.defined()) throw Error("graph tracer: an undefined tensor reached a traced op");
  const TensorImpl* impl = t.impl();
  if (impl->traced_value >= 0) {
    if (impl->trace_graph != &graph_) {
      throw Error("graph tracer: tensor " + describe(t) + " belongs to another trace");
    }
    return ValueId(impl->traced_value);
  }
  auto it = captured_.find(impl);
  if (it != captured_.end()) return it->second;
  ValueId v = graph_.add_value(ops::meta_of(t), ValueKind::state);
  graph_.value(v).tensor = t;
  captured_.emplace(impl, v);
  return v;
}

Tensor Tracer::tensor_of(ValueId v) const {
  const ops::TensorMeta& m = graph_.value(v).meta;
  Tensor t = Tensor::traced(m.shape, m.dtype, v, &graph_);
  if (m.layout == ops::Layout::channels_last && m.shape.rank() == 4) {
    t.impl()->strides = channels_last_strides(m.shape);
  }
  return t;
}

void Tracer::add_output(const Tensor& t) {
  graph_.outputs().push_back(value_of(t));
}

std::vector<Tensor> Tracer::record(ops::OpKind kind, std::span<const Tensor> inputs,
                                   const ops::Attrs& attrs,
                                   std::span<const ops::TensorMeta> outputs) {
  Node node;
  node.type = NodeType::op;
  node.op = kind;
  node.attrs = attrs;
  if (const ops::Strategy* strategy = ops::scoped_strategy(kind)) node.strategy = *strategy;
  node.inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) node.inputs.push_back(value_of(t));
  NodeId id = graph_.add_node(std::move(node), {outputs.begin(), outputs.end()});
  std::vector<Tensor> result;
  for (ValueId v : graph_.node(id).outputs) result.push_back(tensor_of(v));
  return result;
}

void Tracer::finish() {
  if (finished_) return;
  finished_ = true;
  for (auto it = marked_.rbegin(); it != marked_.rend(); ++it) {
    it->impl->traced_value = it->old_value;
    it->impl->trace_graph = it->old_graph;
  }
  marked_.clear();
  // Which captured values some node writes in place: those stay state even if orphaned.
  std::vector<bool> mutated(graph_.num_values());
  for (size_t i = 0; i < graph_.num_nodes(); ++i) {
    const Node& n = graph_.node(NodeId(i));
    if (n.type != NodeType::op) continue;
    uint32_t bits = ops::op_def(n.op).mutated_inputs;
    for (size_t j = 0; j < n.inputs.size() && j < 32; ++j) {
      if (bits >> j & 1u) mutated[size_t(n.inputs[j])] = true;
    }
  }
  for (auto& [impl, v] : captured_) {
    Value& value = graph_.value(v);
    // Only the graph holds the tensor and its memory: nobody else can read or change it.
    const Tensor& t = value.tensor;
    if (!mutated[size_t(v)] && t.impl_ptr().use_count() == 1 && t.impl()->storage &&
        t.impl()->storage.use_count() == 1) {
      value.kind = ValueKind::constant;
    }
  }
  captured_.clear();
}

}  // namespace kiln::graph
