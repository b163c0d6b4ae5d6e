#include "kiln/parallel/auto_problem.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <set>

#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"
#include "kiln/parallel/redistribution.h"
#include "kiln/parallel/strategy_candidates.h"

namespace kiln::parallel {
namespace {

using graph::Graph;
using graph::NodeId;
using graph::ValueId;

// Forward and backward: a backward runs about two forwards' work (the data and the weight
// gradients), and mirrors every redistribution (an all_gather's gradient is a reduce_scatter).
constexpr double kStepComputeFactor = 3.0;
constexpr double kStepCommunicationFactor = 2.0;

double local_bytes(const TensorLayout& l, DType dtype) {
  return double(l.local_shape().numel()) * double(dtype_size(dtype));
}

std::string parts_str(const std::vector<int64_t>& parts) {
  std::string s = "(";
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + std::to_string(parts[i]);
  return s + (parts.size() == 1 ? ",)" : ")");
}

std::string value_name(const Graph& g, ValueId v) {
  const graph::Value& value = g.value(v);
  if (!value.name.empty()) return value.name;
  return "%" + std::to_string(v);
}

}  // namespace

AutoProblem::AutoProblem(const Graph& g, ValueId loss, int64_t devices,
                         const AutoParallelOptions& options,
                         const std::map<ValueId, TensorLayout>& fixed,
                         const std::map<NodeId, ops::Strategy>& extra_strategies,
                         const std::map<ValueId, TensorLayout>& extra_layouts)
    : devices(devices), g_(g), options_(options) {
  const MachineModel& machine = options.machine;
  const CandidateOptions candidate_options{.fully_use_devices = options.fully_use_devices};
  // Values the backward differentiates: trainable parameters and what is computed from them.
  std::vector<bool> differentiated(g.num_values(), false);
  for (size_t v = 0; v < g.num_values(); ++v) {
    const graph::Value& value = g.value(ValueId(v));
    differentiated[v] = value.kind == graph::ValueKind::state && value.tensor.requires_grad();
  }
  // Measured times (where the machine model has them) for each op under each strategy, asked
  // for all at once below: in a job the ranks plan alike from rank 0's measurements.
  std::vector<autograd::OpTimingQuery> timing_queries;
  std::vector<std::pair<size_t, size_t>> timed;  // [query]: (op entry, strategy)
  std::vector<std::vector<double>> op_bytes;     // [op entry][strategy]
  std::map<NodeId, int> entry_of;
  for (NodeId id : g.schedule()) {
    const graph::Node& n = g.node(id);
    if (n.type != graph::NodeType::op) continue;
    uint32_t differentiable = 0;
    for (size_t i = 0; i < n.inputs.size() && i < 32; ++i) {
      if (differentiated[size_t(n.inputs[i])]) differentiable |= 1u << i;
    }
    if (differentiable != 0 && ops::op_def(n.op).grad != nullptr) {
      for (ValueId out : n.outputs) differentiated[size_t(out)] = true;
    }
    OpEntry e;
    e.id = id;
    e.strategies = candidate_strategies(g, id, devices, candidate_options);
    auto extra = extra_strategies.find(id);
    if (extra != extra_strategies.end() &&
        std::find(e.strategies.begin(), e.strategies.end(), extra->second) == e.strategies.end()) {
      e.strategies.push_back(extra->second);
    }
    std::vector<ops::TensorMeta> metas;
    for (ValueId v : n.inputs) metas.push_back(g.value(v).meta);
    std::vector<double> bytes;
    for (const ops::Strategy& s : e.strategies) {
      const ops::ShardedForm form = ops::shard_form(n.op, metas, n.attrs, s, devices);
      std::vector<TensorLayout> in, out;
      std::vector<PlacementKey> in_keys, out_keys;
      for (size_t i = 0; i < metas.size(); ++i) {
        in.push_back(TensorLayout::of_form(form, false, i, metas[i].shape, devices));
        in_keys.push_back(PlacementKey::of(in.back()));
      }
      double activations = 0, communication = 0;
      for (size_t o = 0; o < n.outputs.size(); ++o) {
        const graph::Value& value = g.value(n.outputs[o]);
        out.push_back(TensorLayout::of_form(form, true, o, value.meta.shape, devices));
        out_keys.push_back(PlacementKey::of(out.back()));
        if (!graph::is_view(n)) activations += local_bytes(out.back(), value.meta.dtype);
        if (n.outputs[o] == loss) {
          const TensorLayout whole = TensorLayout::replicated(value.meta.shape, devices);
          communication += redistribution_seconds(out_keys.back(), PlacementKey::of(whole),
                                                  value.meta.dtype, machine.comm);
        }
      }
      const ops::Cost cost = ops::sharded_cost(n.op, metas, n.attrs, form);
      e.compute_s.push_back(kStepComputeFactor * machine.op_seconds(cost));
      if (machine.op_times && !graph::is_view(n)) {
        autograd::OpTimingQuery q{
            .kind = n.op, .attrs = form.local_attrs, .differentiable = differentiable};
        for (size_t i = 0; i < metas.size(); ++i) {
          q.inputs.push_back({in[i].local_shape(), metas[i].dtype, metas[i].layout});
        }
        timing_queries.push_back(std::move(q));
        timed.emplace_back(ops_.size(), e.compute_s.size() - 1);
      }
      e.communication_s.push_back(communication);
      bytes.push_back(activations);
      e.inputs.push_back(std::move(in));
      e.outputs.push_back(std::move(out));
      e.input_keys.push_back(std::move(in_keys));
      e.output_keys.push_back(std::move(out_keys));
    }
    op_bytes.push_back(std::move(bytes));
    entry_of[id] = int(ops_.size());
    ops_.push_back(std::move(e));
  }
  if (machine.op_times) {
    const std::vector<double> seconds = machine.op_times->seconds(timing_queries);
    for (size_t q = 0; q < seconds.size(); ++q) {
      if (std::isnan(seconds[q])) continue;  // no kernel to time here: the estimate stands
      ops_[timed[q].first].compute_s[timed[q].second] = seconds[q];
    }
  }
  for (size_t op = 0; op < ops_.size(); ++op) {
    OpEntry& e = ops_[op];
    const graph::Node& n = g.node(e.id);
    std::vector<double> cost(e.strategies.size());
    for (size_t s = 0; s < cost.size(); ++s) cost[s] = e.compute_s[s] + e.communication_s[s];
    e.node = time_graph.add_node(
        cost, std::string(ops::op_name(n.op)) + " %" + std::to_string(n.outputs.at(0)));
    node_bytes.push_back(op_bytes[op]);
    node_compute_.push_back(e.compute_s);
  }

  // Parameters and buffers: the layouts their readers want, whole first.
  const std::vector<std::vector<NodeId>> users = g.users();
  std::map<ValueId, int> parameter_of;
  for (size_t v = 0; v < g.num_values(); ++v) {
    const graph::Value& value = g.value(ValueId(v));
    if (value.kind != graph::ValueKind::state || users[v].empty()) continue;
    ParameterEntry p;
    p.value = ValueId(v);
    p.trainable = value.tensor.requires_grad();
    auto add_layout = [&](const TensorLayout& l) {
      const PlacementKey key = PlacementKey::of(l);
      if (l.is_partial() || std::find(p.keys.begin(), p.keys.end(), key) != p.keys.end()) return;
      p.layouts.push_back(l);
      p.keys.push_back(key);
    };
    auto f = fixed.find(ValueId(v));
    if (f != fixed.end()) {
      add_layout(f->second);
    } else {
      add_layout(TensorLayout::replicated(value.meta.shape, devices));
      auto extra = extra_layouts.find(ValueId(v));
      if (extra != extra_layouts.end()) add_layout(extra->second);
      for (NodeId u : users[v]) {
        const OpEntry& e = ops_[size_t(entry_of.at(u))];
        const graph::Node& n = g.node(u);
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          if (n.inputs[i] != ValueId(v)) continue;
          for (const auto& in : e.inputs) add_layout(in[i]);
        }
      }
    }
    const int states = options.optimizer_states;
    // Gradients that every rank holds alike share data parallelism's buckets, so each pays its
    // bytes and its share of a bucket's message rounds; a smaller group's all-reduce pays all.
    auto gradient_reduce_seconds = [&](double bytes, int64_t group) {
      const double full = machine.comm.all_reduce(bytes, group);
      if (group != devices || group <= 1) return full;
      const double rounds = machine.comm.all_reduce(0, group);
      return full - rounds + rounds * std::min(1.0, bytes / options.gradient_bucket_bytes);
    };
    std::vector<double> cost, bytes;
    for (const TensorLayout& l : p.layouts) {
      const double b = local_bytes(l, value.meta.dtype);
      int64_t blocks = 1;
      for (int64_t parts : l.parts()) blocks *= parts;
      const double update =
          p.trainable ? b * double(3 + 2 * states) / machine.bytes_per_s + machine.launch_s : 0;
      const double reduce = p.trainable ? gradient_reduce_seconds(b, devices / blocks) : 0;
      p.compute_s.push_back(update);
      p.communication_s.push_back(reduce);
      cost.push_back(update + reduce);
      bytes.push_back(p.trainable ? b * double(2 + states) : b);
    }
    p.node = time_graph.add_node(cost, "parameter " + value_name(g, ValueId(v)));
    node_bytes.push_back(bytes);
    node_compute_.push_back(p.compute_s);
    parameter_of[ValueId(v)] = int(parameters_.size());
    parameters_.push_back(std::move(p));
  }

  // An edge per tensor an op reads from another op or from a parameter; inputs and constants
  // are whole on every rank, so any split of them is a local slice, free.
  for (size_t c = 0; c < ops_.size(); ++c) {
    const graph::Node& n = g.node(ops_[c].id);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const graph::Value& value = g.value(n.inputs[i]);
      EdgeSource src{.consumer = int(c), .slot = int(i), .dtype = value.meta.dtype};
      const std::vector<PlacementKey>* from_keys = nullptr;
      std::vector<PlacementKey> producer_keys;
      int from_node = -1;
      if (value.producer >= 0 && entry_of.count(value.producer)) {
        src.producer = entry_of.at(value.producer);
        src.output = value.output_index;
        const OpEntry& p = ops_[size_t(src.producer)];
        for (const auto& keys : p.output_keys) producer_keys.push_back(keys[size_t(src.output)]);
        from_keys = &producer_keys;
        from_node = p.node;
      } else if (parameter_of.count(n.inputs[i])) {
        src.parameter = parameter_of.at(n.inputs[i]);
        from_keys = &parameters_[size_t(src.parameter)].keys;
        from_node = parameters_[size_t(src.parameter)].node;
      } else {
        continue;
      }
      const OpEntry& consumer = ops_[c];
      const size_t nc = consumer.strategies.size();
      std::vector<double> cost(from_keys->size() * nc);
      for (size_t a = 0; a < from_keys->size(); ++a) {
        for (size_t b = 0; b < nc; ++b) {
          cost[a * nc + b] = kStepCommunicationFactor *
                             redistribution_seconds((*from_keys)[a], consumer.input_keys[b][i],
                                                    value.meta.dtype, machine.comm);
        }
      }
      time_graph.add_edge(from_node, consumer.node, std::move(cost));
      edges_.push_back(src);
    }
  }
  incident_.resize(time_graph.nodes.size());
  for (size_t e = 0; e < time_graph.edges.size(); ++e) {
    incident_[size_t(time_graph.edges[e].a)].push_back(int(e));
    incident_[size_t(time_graph.edges[e].b)].push_back(int(e));
  }
}

StepPrediction AutoProblem::evaluate(const std::vector<int>& choice) const {
  StepPrediction p;
  for (size_t v = 0; v < time_graph.nodes.size(); ++v) {
    const size_t s = size_t(choice[v]);
    p.compute_s += node_compute_[v][s];
    p.communication_s += time_graph.nodes[v].cost[s] - node_compute_[v][s];
    (is_compute_node(int(v)) ? p.activation_bytes : p.parameter_bytes) += node_bytes[v][s];
  }
  for (const CostGraph::Edge& e : time_graph.edges) {
    p.communication_s += e.cost[size_t(choice[size_t(e.a)]) * time_graph.strategies(e.b) +
                                size_t(choice[size_t(e.b)])];
  }
  return p;
}

int AutoProblem::data_parallel_strategy(size_t op) const {
  const OpEntry& e = ops_[op];
  for (size_t s = 0; s < e.strategies.size(); ++s) {
    const std::vector<int64_t>& first = e.strategies[s].at(0);
    if (first.empty() || first[0] != devices) continue;
    bool only_batch = true;
    for (size_t d = 1; d < first.size(); ++d) only_batch = only_batch && first[d] == 1;
    if (only_batch) return int(s);
  }
  return -1;
}

std::vector<int> AutoProblem::data_parallel_choice() const {
  std::vector<int> choice(time_graph.nodes.size(), 0);
  for (size_t op = 0; op < ops_.size(); ++op) {
    choice[size_t(ops_[op].node)] = std::max(0, data_parallel_strategy(op));
  }
  return choice;
}

std::vector<int> AutoProblem::choice_of(const std::map<NodeId, ops::Strategy>& strategies,
                                        const std::map<ValueId, TensorLayout>& layouts) const {
  std::vector<int> choice(time_graph.nodes.size(), 0);
  for (const OpEntry& e : ops_) {
    auto it = strategies.find(e.id);
    if (it == strategies.end()) continue;
    auto s = std::find(e.strategies.begin(), e.strategies.end(), it->second);
    if (s != e.strategies.end()) choice[size_t(e.node)] = int(s - e.strategies.begin());
  }
  for (const ParameterEntry& p : parameters_) {
    auto it = layouts.find(p.value);
    if (it == layouts.end()) continue;
    auto k = std::find(p.keys.begin(), p.keys.end(), PlacementKey::of(it->second));
    if (k != p.keys.end()) choice[size_t(p.node)] = int(k - p.keys.begin());
  }
  return choice;
}

std::vector<int> AutoProblem::greedy_order() const {
  std::vector<int> order(ops_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return ops_[size_t(a)].compute_s[0] > ops_[size_t(b)].compute_s[0];
  });
  for (int& o : order) o = ops_[size_t(o)].node;
  for (const ParameterEntry& p : parameters_) order.push_back(p.node);
  return order;
}

const TensorLayout& AutoProblem::edge_from(const EdgeSource& e, int strategy) const {
  if (e.producer >= 0) return ops_[size_t(e.producer)].outputs[size_t(strategy)][size_t(e.output)];
  return parameters_[size_t(e.parameter)].layouts[size_t(strategy)];
}

const TensorLayout& AutoProblem::edge_to(const EdgeSource& e, int strategy) const {
  return ops_[size_t(e.consumer)].inputs[size_t(strategy)][size_t(e.slot)];
}

bool AutoProblem::refuse_unsupported_edges(const std::vector<int>& choice) {
  bool refused = false;
  for (size_t i = 0; i < edges_.size(); ++i) {
    CostGraph::Edge& edge = time_graph.edges[i];
    const int sa = choice[size_t(edge.a)], sb = choice[size_t(edge.b)];
    const TensorLayout& from = edge_from(edges_[i], sa);
    const TensorLayout& to = edge_to(edges_[i], sb);
    try {
      for (int64_t rank : {int64_t(0), devices - 1}) {
        plan_redistribution(from, to, rank, edges_[i].dtype, options_.machine.comm);
      }
    } catch (const Error&) {
      edge.cost[size_t(sa) * time_graph.strategies(edge.b) + size_t(sb)] = kInfiniteCost;
      refused = true;
    }
  }
  return refused;
}

int64_t AutoProblem::candidates() const {
  int64_t n = 0;
  for (const CostGraph::Node& node : time_graph.nodes) n += int64_t(node.cost.size());
  return n;
}

std::pair<double, double> AutoProblem::local_cost(const std::vector<int>& changed,
                                                  const std::vector<int>& choice) const {
  double seconds = 0, bytes = 0;
  std::set<int> edges;
  for (int v : changed) {
    seconds += time_graph.nodes[size_t(v)].cost[size_t(choice[size_t(v)])];
    bytes += node_bytes[size_t(v)][size_t(choice[size_t(v)])];
    edges.insert(incident_[size_t(v)].begin(), incident_[size_t(v)].end());
  }
  for (int e : edges) {
    const CostGraph::Edge& edge = time_graph.edges[size_t(e)];
    seconds += edge.cost[size_t(choice[size_t(edge.a)]) * time_graph.strategies(edge.b) +
                         size_t(choice[size_t(edge.b)])];
  }
  return {seconds, bytes};
}

void AutoProblem::describe(const std::vector<int>& choice, AutoPlan& plan) const {
  const std::vector<std::vector<NodeId>> users = g_.users();
  for (size_t op = 0; op < ops_.size(); ++op) {
    const OpEntry& e = ops_[op];
    const graph::Node& n = g_.node(e.id);
    const int s = choice[size_t(e.node)];
    AutoOpChoice c;
    c.strategy = e.strategies[size_t(s)];
    const ops::OpDef& def = ops::op_def(n.op);
    if (ops::is_replicated(c.strategy)) {
      c.what = "runs whole on every rank";
      if (!def.shard && def.no_shard_reason)
        c.what += std::string(" (") + def.no_shard_reason + ")";
    } else {
      const int dp = data_parallel_strategy(op);
      bool model_parallel = false;
      std::vector<std::string> splits;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        bool split = false;
        for (int64_t p : c.strategy[i]) split = split || p > 1;
        if (!split) continue;
        const bool state = g_.value(n.inputs[i]).kind == graph::ValueKind::state;
        model_parallel = model_parallel || state;
        splits.push_back((state ? value_name(g_, n.inputs[i]) : "input " + std::to_string(i)) +
                         " split " + parts_str(c.strategy[i]));
      }
      if (dp == s) {
        c.what = "the batch split in " + std::to_string(devices) + " (data parallel)";
      } else {
        c.what = model_parallel ? "model parallel: " : "";
        for (size_t i = 0; i < splits.size(); ++i) c.what += (i ? ", " : "") + splits[i];
      }
      for (const auto& partial : e.outputs[size_t(s)]) {
        if (partial.is_partial()) {
          c.what += "; its result is a partial sum, reduced where it is read";
          break;
        }
      }
    }
    // Against the batch split of this op (with the parameters only it reads replicated).
    const int dp = data_parallel_strategy(op);
    if (dp >= 0 && dp != s) {
      std::vector<int> changed{e.node};
      std::vector<int> alternative = choice;
      alternative[size_t(e.node)] = dp;
      for (ValueId v : n.inputs) {
        for (const ParameterEntry& p : parameters_) {
          if (p.value != v || users[size_t(v)].size() != 1) continue;
          changed.push_back(p.node);
          alternative[size_t(p.node)] = 0;  // whole
        }
      }
      const auto [t_chosen, b_chosen] = local_cost(changed, choice);
      const auto [t_alt, b_alt] = local_cost(changed, alternative);
      char text[240];
      const double dt = (t_alt - t_chosen) * 1e3, db = (b_alt - b_chosen) / double(1 << 20);
      // The others as planned: what this op alone would cost with the batch split instead.
      if (dt >= 0) {
        std::snprintf(text, sizeof text, "the batch split for this op alone: %.3f ms more per step",
                      dt);
        c.why = text;
        if (db > 0.05) {
          std::snprintf(text, sizeof text, " and %.1f MiB more per rank", db);
          c.why += text;
        }
      } else {
        std::snprintf(text, sizeof text,
                      "the batch split for this op alone: %.3f ms less per step but %.1f MiB more "
                      "per rank, over the memory limit",
                      -dt, db);
        c.why = text;
      }
    }
    plan.ops[e.id] = std::move(c);
  }
  for (const ParameterEntry& p : parameters_) {
    plan.parameters.emplace(p.value, p.layouts[size_t(choice[size_t(p.node)])]);
  }
}

}  // namespace kiln::parallel
