#include "kiln/parallel/sharding_plan.h"

#include <deque>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"

namespace kiln::parallel {
namespace {

using graph::Graph;
using graph::Node;
using graph::NodeId;
using graph::ValueId;

constexpr double kInfinite = std::numeric_limits<double>::infinity();

std::vector<ops::TensorMeta> input_metas(const Graph& g, const Node& n) {
  std::vector<ops::TensorMeta> m;
  for (ValueId v : n.inputs) m.push_back(g.value(v).meta);
  return m;
}

OpPlan make_plan(const Graph& g, NodeId id, const ops::Strategy& strategy, OpPlan::Source source,
                 std::string why, int64_t ranks) {
  const Node& n = g.node(id);
  const std::vector<ops::TensorMeta> metas = input_metas(g, n);
  OpPlan p;
  p.strategy = strategy;
  p.source = source;
  p.why = std::move(why);
  p.form = ops::shard_form(n.op, metas, n.attrs, strategy, ranks);
  for (size_t i = 0; i < metas.size(); ++i) {
    p.inputs.push_back(TensorLayout::of_form(p.form, false, i, metas[i].shape, ranks));
  }
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    p.outputs.push_back(
        TensorLayout::of_form(p.form, true, o, g.value(n.outputs[o]).meta.shape, ranks));
  }
  p.cost_per_rank = ops::sharded_cost(n.op, metas, n.attrs, p.form);
  return p;
}

double redistribution_seconds(const TensorLayout& from, const TensorLayout& to, DType dtype,
                              const CommCostModel& model) {
  try {
    return plan_redistribution(from, to, 0, dtype, model).seconds;
  } catch (const Error&) {
    return kInfinite;
  }
}

std::string node_ref(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return std::string(ops::op_name(n.op)) + " %" +
         std::to_string(n.outputs.empty() ? -1 : n.outputs[0]);
}

}  // namespace

ShardingPlan plan_sharding(const Graph& g, int64_t ranks,
                           const std::map<ValueId, TensorLayout>& fixed, const CommCostModel& model,
                           const std::map<NodeId, std::string>& searched) {
  ShardingPlan plan;
  plan.ranks = ranks;
  plan.ops.resize(g.num_nodes());
  plan.held.resize(g.num_values());
  const std::vector<std::vector<NodeId>> users = g.users();
  const std::vector<NodeId> order = g.schedule();

  // The user's strategies, checked.
  std::deque<NodeId> queue;
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (n.type != graph::NodeType::op || n.strategy.empty()) continue;
    auto it = searched.find(id);
    plan.ops[size_t(id)] =
        it == searched.end()
            ? make_plan(g, id, n.strategy, OpPlan::Source::user, "your strategy", ranks)
            : make_plan(g, id, n.strategy, OpPlan::Source::searched, it->second, ranks);
    queue.push_back(id);
  }

  auto decided = [&](NodeId id) { return plan.ops[size_t(id)].has_value(); };
  auto has_rule = [&](NodeId id) {
    const Node& n = g.node(id);
    return n.type == graph::NodeType::op && ops::op_def(n.op).shard != nullptr;
  };
  // What a candidate for node m costs in redistributions against its decided neighbours.
  auto edge_cost = [&](NodeId m, const OpPlan& c) {
    const Node& n = g.node(m);
    double total = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const graph::Value& v = g.value(n.inputs[i]);
      if (v.producer < 0 || !decided(v.producer)) continue;
      total += redistribution_seconds(plan.ops[size_t(v.producer)]->outputs[size_t(v.output_index)],
                                      c.inputs[i], v.meta.dtype, model);
    }
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      for (NodeId u : users[size_t(n.outputs[o])]) {
        if (!decided(u)) continue;
        const Node& un = g.node(u);
        for (size_t j = 0; j < un.inputs.size(); ++j) {
          if (un.inputs[j] != n.outputs[o]) continue;
          total += redistribution_seconds(c.outputs[o], plan.ops[size_t(u)]->inputs[j],
                                          g.value(n.outputs[o]).meta.dtype, model);
        }
      }
    }
    return total;
  };
  // The best strategy node m's rule derives from its decided neighbours' splits.
  auto propagate_to = [&](NodeId m) {
    const Node& n = g.node(m);
    const ops::ShardRule& rule = *ops::op_def(n.op).shard;
    const std::vector<ops::TensorMeta> metas = input_metas(g, n);
    std::optional<OpPlan> best;
    double best_cost = kInfinite;
    // `derive` runs the rule's follow, which may refuse by throwing too. `taken` says whether
    // the candidate takes the neighbour's split as it is; when not, the plan says what the
    // rule accepts (why it does not: a spatial split, a batch norm's batch in training, ...).
    auto consider = [&](const std::function<std::optional<ops::Strategy>()>& derive, NodeId from,
                        const std::function<bool(const OpPlan&)>& taken) {
      try {
        const std::optional<ops::Strategy> s = derive();
        if (!s) return;
        std::string why = ops::is_replicated(*s)
                              ? "runs whole: it cannot take the split or partial sums of " +
                                    node_ref(g, from) +
                                    " as they are, so they are redistributed for it"
                              : "follows the split of " + node_ref(g, from);
        OpPlan c = make_plan(g, m, *s, OpPlan::Source::propagated, why, ranks);
        if (!taken(c)) {
          c.why += (ops::is_replicated(*s) ? " (" : " where it can (") +
                   std::string(ops::op_name(n.op)) + " accepts " + rule.accepts + ")";
        }
        const double cost = edge_cost(m, c);
        if (!best || cost < best_cost) {
          best = std::move(c);
          best_cost = cost;
        }
      } catch (const ShapeError&) {
      }
    };
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const graph::Value& v = g.value(n.inputs[i]);
      if (v.producer < 0 || !decided(v.producer)) continue;
      const TensorLayout& l = plan.ops[size_t(v.producer)]->outputs[size_t(v.output_index)];
      consider([&] { return rule.follow(metas, n.attrs, int(i), l.parts()); }, v.producer,
               [&](const OpPlan& c) { return c.inputs[i].parts() == l.parts(); });
    }
    if (!n.outputs.empty()) {
      for (NodeId u : users[size_t(n.outputs[0])]) {
        if (!decided(u)) continue;
        const Node& un = g.node(u);
        for (size_t j = 0; j < un.inputs.size(); ++j) {
          if (un.inputs[j] != n.outputs[0]) continue;
          const std::vector<int64_t> parts = plan.ops[size_t(u)]->inputs[j].parts();
          consider([&] { return rule.follow(metas, n.attrs, -1, parts); }, u,
                   [&](const OpPlan& c) { return c.outputs[0].parts() == parts; });
        }
      }
    }
    return best;
  };

  while (!queue.empty()) {
    const NodeId id = queue.front();
    queue.pop_front();
    const Node& n = g.node(id);
    std::vector<NodeId> neighbours;
    for (ValueId v : n.inputs) {
      if (g.value(v).producer >= 0) neighbours.push_back(g.value(v).producer);
    }
    for (ValueId v : n.outputs) {
      for (NodeId u : users[size_t(v)]) neighbours.push_back(u);
    }
    for (NodeId m : neighbours) {
      if (decided(m) || !has_rule(m)) continue;
      std::optional<OpPlan> p = propagate_to(m);
      if (!p) continue;
      plan.ops[size_t(m)] = std::move(p);
      queue.push_back(m);
    }
  }

  for (NodeId id : order) {
    if (decided(id)) continue;
    const Node& n = g.node(id);
    const ops::Strategy whole = ops::replicated_strategy(input_metas(g, n));
    if (has_rule(id)) {
      plan.ops[size_t(id)] = make_plan(g, id, whole, OpPlan::Source::unreached,
                                       "no split reaches it: runs replicated", ranks);
    } else {
      const char* reason = ops::op_def(n.op).no_shard_reason;
      plan.ops[size_t(id)] =
          make_plan(g, id, whole, OpPlan::Source::no_rule,
                    std::string("runs replicated: ") + (reason ? reason : "?"), ranks);
    }
  }

  // What each value is held as.
  for (size_t v = 0; v < g.num_values(); ++v) {
    const graph::Value& value = g.value(ValueId(v));
    auto f = fixed.find(ValueId(v));
    if (f != fixed.end()) {
      plan.held[v] = f->second;
    } else if (value.producer >= 0) {
      if (plan.ops[size_t(value.producer)]) {
        plan.held[v] = plan.ops[size_t(value.producer)]->outputs[size_t(value.output_index)];
      }
    } else if (value.kind == graph::ValueKind::state && !users[v].empty()) {
      // Its first consumer's layout.
      const NodeId u = users[v].front();
      const Node& un = g.node(u);
      for (size_t j = 0; j < un.inputs.size(); ++j) {
        if (un.inputs[j] == ValueId(v)) {
          plan.held[v] = plan.ops[size_t(u)]->inputs[j];
          break;
        }
      }
    }
    if (!plan.held[v]) plan.held[v] = TensorLayout::replicated(value.meta.shape, ranks);
  }
  return plan;
}

std::vector<InsertedRedistribution> ShardingPlan::redistributions(
    const Graph& g, int64_t rank, const CommCostModel& model) const {
  std::vector<InsertedRedistribution> list;
  for (NodeId id : g.schedule()) {
    if (!ops[size_t(id)]) continue;
    const OpPlan& p = *ops[size_t(id)];
    const Node& n = g.node(id);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      Redistribution r = plan_redistribution(*held[size_t(n.inputs[i])], p.inputs[i], rank,
                                             g.value(n.inputs[i]).meta.dtype, model);
      if (!r.empty()) list.push_back({id, i, std::move(r)});
    }
  }
  return list;
}

std::string ShardingPlan::str(const Graph& g, int64_t rank, const CommCostModel& model) const {
  std::ostringstream s;
  s << "Sharding plan for " << ranks << " ranks (redistributions as rank " << rank
    << " runs them):\n";
  double flops = 0, seconds = 0;
  for (NodeId id : g.schedule()) {
    if (!ops[size_t(id)]) continue;
    const OpPlan& p = *ops[size_t(id)];
    const Node& n = g.node(id);
    s << "  " << node_ref(g, id) << " strategy " << ops::strategy_str(p.strategy) << ": " << p.why;
    s << "\n      out: ";
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      s << (o ? "; " : "") << g.value(n.outputs[o]).meta.shape.str() << " " << p.outputs[o].str();
    }
    if (!p.form.communication.empty()) s << "\n      communication: " << p.form.communication;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const graph::Value& v = g.value(n.inputs[i]);
      const Redistribution r =
          plan_redistribution(*held[size_t(n.inputs[i])], p.inputs[i], rank, v.meta.dtype, model);
      if (r.empty()) continue;
      seconds += r.seconds;
      s << "\n      input " << i << " (%" << n.inputs[i] << (v.name.empty() ? "" : " " + v.name)
        << "): " << r.str() << " (~" << r.seconds * 1e6 << " us)";
    }
    s << "\n      per rank: " << p.cost_per_rank.flops / 1e6 << " MFLOP\n";
    flops += p.cost_per_rank.flops;
  }
  s << "  forward per rank: " << flops / 1e6 << " MFLOP, ~" << seconds * 1e6
    << " us of redistribution (alpha-beta model; the backward mirrors it)\n";
  for (size_t v = 0; v < g.num_values(); ++v) {
    const graph::Value& value = g.value(ValueId(v));
    if (value.kind != graph::ValueKind::state || !held[v] || held[v]->is_replicated()) continue;
    s << "  parameter " << (value.name.empty() ? "%" + std::to_string(v) : value.name) << " "
      << value.meta.shape.str() << ": " << held[v]->str() << ", each rank holds "
      << held[v]->local_shape().str() << "\n";
  }
  return s.str();
}

}  // namespace kiln::parallel
