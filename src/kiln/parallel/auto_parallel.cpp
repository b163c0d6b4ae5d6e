#include "kiln/parallel/auto_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "kiln/comm/communicator.h"
#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"
#include "kiln/parallel/auto_problem.h"
#include "kiln/parallel/sharding_plan.h"

namespace kiln::parallel {
namespace {

using graph::Graph;
using graph::NodeId;
using graph::ValueId;

double mib(double bytes) {
  return bytes / double(1 << 20);
}

// The node costs of the time graph plus lambda seconds per byte of memory.
CostGraph priced(const AutoProblem& p, double lambda) {
  CostGraph g = p.time_graph;
  if (lambda > 0) {
    for (size_t v = 0; v < g.nodes.size(); ++v) {
      for (size_t s = 0; s < g.nodes[v].cost.size(); ++s) {
        g.nodes[v].cost[s] += lambda * p.node_bytes[v][s];
      }
    }
  }
  return g;
}

SearchResult run_search(const AutoProblem& p, SearchMode mode, double lambda) {
  const CostGraph g = priced(p, lambda);
  if (mode == SearchMode::recursive_programming) return search_greedy(g, p.greedy_order());
  return search_dynamic_programming(g);
}

// Searches with the memory limit: λ = 0 first; if that plan does not fit, the smallest λ whose
// plan fits (bisection over its logarithm).
SearchResult search_within_memory(const AutoProblem& p, const AutoParallelOptions& o,
                                  double& lambda) {
  lambda = 0;
  SearchResult r = run_search(p, o.search, 0);
  const double limit = o.memory_limit_bytes;
  if (limit <= 0 || p.evaluate(r.choice).memory_bytes() <= limit) return r;
  // Seconds per byte: from a µs per GiB up to far beyond any step's time per byte.
  double lo = 1e-15, hi = lo;
  SearchResult fit;
  bool found = false;
  while (hi < 1e3) {
    SearchResult t = run_search(p, o.search, hi);
    if (p.evaluate(t.choice).memory_bytes() <= limit) {
      fit = std::move(t);
      found = true;
      break;
    }
    lo = hi;
    hi *= 16;
  }
  if (!found) {
    const SearchResult least = run_search(p, o.search, 1e6);
    throw Error(detail::concat("AUTO_PARALLEL: no plan for ", p.devices,
                               " devices fits the memory limit of ", mib(limit),
                               " MiB per rank; the least memory a plan needs is ",
                               mib(p.evaluate(least.choice).memory_bytes()),
                               " MiB (raise the limit or use more devices)"));
  }
  for (int i = 0; i < 24 && hi / lo > 1.05; ++i) {
    const double mid = std::sqrt(lo * hi);
    SearchResult t = run_search(p, o.search, mid);
    if (p.evaluate(t.choice).memory_bytes() <= limit) {
      fit = std::move(t);
      hi = mid;
    } else {
      lo = mid;
    }
  }
  lambda = hi;
  return fit;
}

// The user's strategies, propagated (sharding_plan.h); with none given, propagation starts from
// the batch split of every op that reads a graph input.
ShardingPlan propagate(const Graph& g, int64_t devices,
                       const std::map<ValueId, TensorLayout>& fixed, const CommCostModel& comm) {
  bool any = false;
  for (NodeId id : g.schedule()) any = any || !g.node(id).strategy.empty();
  if (any) return plan_sharding(g, devices, fixed, comm);
  Graph seeded = g;
  for (NodeId id : seeded.schedule()) {
    graph::Node& n = seeded.node(id);
    const ops::ShardRule* rule = ops::op_def(n.op).shard;
    if (n.type != graph::NodeType::op || !rule || n.inputs.empty()) continue;
    const graph::Value& first = seeded.value(n.inputs[0]);
    if (first.kind != graph::ValueKind::input || first.meta.shape.rank() == 0 ||
        first.meta.shape[0] % devices != 0) {
      continue;
    }
    std::vector<ops::TensorMeta> metas;
    for (ValueId v : n.inputs) metas.push_back(seeded.value(v).meta);
    std::vector<int64_t> parts(size_t(first.meta.shape.rank()), 1);
    parts[0] = devices;
    try {
      if (auto s = rule->follow(metas, n.attrs, 0, parts)) {
        ops::shard_form(n.op, metas, n.attrs, *s, devices);
        n.strategy = *s;
      }
    } catch (const ShapeError&) {
    }
  }
  return plan_sharding(seeded, devices, fixed, comm);
}

}  // namespace

std::string search_mode_name(SearchMode mode) {
  switch (mode) {
    case SearchMode::dynamic_programming:
      return "dynamic_programming";
    case SearchMode::recursive_programming:
      return "recursive_programming";
    case SearchMode::sharding_propagation:
      return "sharding_propagation";
  }
  return "?";
}

SearchMode parse_search_mode(const std::string& name) {
  for (SearchMode m : {SearchMode::dynamic_programming, SearchMode::recursive_programming,
                       SearchMode::sharding_propagation}) {
    if (name == search_mode_name(m)) return m;
  }
  throw Error("search_mode '" + name +
              "' is not one of dynamic_programming, recursive_programming, sharding_propagation");
}

AutoPlan plan_auto_parallel(const Graph& g, ValueId loss, int64_t devices,
                            const AutoParallelOptions& options,
                            const std::map<ValueId, TensorLayout>& fixed) {
  if (devices < 1) throw Error(detail::concat("AUTO_PARALLEL: ", devices, " devices"));
  const auto start = std::chrono::steady_clock::now();
  AutoPlan plan;
  plan.devices = devices;
  plan.search = options.search;
  plan.memory_limit_bytes = options.memory_limit_bytes;
  plan.machine = options.machine.compute_source + "; collectives: " + options.machine.comm_source;

  // sharding_propagation decides first; its strategies join the candidates so that the cost
  // model prices them like any other.
  std::map<NodeId, ops::Strategy> propagated;
  std::map<ValueId, TensorLayout> propagated_layouts = fixed;
  if (options.search == SearchMode::sharding_propagation) {
    const ShardingPlan sp = propagate(g, devices, fixed, options.machine.comm);
    for (NodeId id : g.schedule()) {
      if (sp.ops[size_t(id)]) propagated[id] = sp.ops[size_t(id)]->strategy;
    }
    for (size_t v = 0; v < g.num_values(); ++v) {
      if (g.value(ValueId(v)).kind == graph::ValueKind::state && sp.held[v]) {
        propagated_layouts.emplace(ValueId(v), *sp.held[v]);
      }
    }
  }

  AutoProblem problem(g, loss, devices, options, fixed, propagated, propagated_layouts);
  if (const auto& times = options.machine.op_times) {
    plan.machine += detail::concat(
        "; ops: forward and backward timed at each strategy's local shapes on ",
        comm::initialized() && comm::size() > 1 ? "rank 0" : "this machine", " (", times->timed(),
        " timed by this process so far, in ", int(times->timing_seconds() * 1e3),
        " ms), the estimate where an op cannot be timed");
  }
  std::vector<int> choice;
  if (options.search == SearchMode::sharding_propagation) {
    choice = problem.choice_of(propagated, propagated_layouts);
    plan.fits = options.memory_limit_bytes <= 0 ||
                problem.evaluate(choice).memory_bytes() <= options.memory_limit_bytes;
  } else {
    // The fast pricing of redistributions does not know the few layout pairs the redistribution
    // steps cannot do; the plan's own are checked exactly, and a refused pair is priced out.
    for (int round = 0;; ++round) {
      SearchResult r = search_within_memory(problem, options, plan.lambda);
      plan.exact = r.exact && options.search == SearchMode::dynamic_programming;
      plan.statistics = r.statistics;
      choice = std::move(r.choice);
      if (!problem.refuse_unsupported_edges(choice) || round == 8) break;
    }
  }
  plan.candidates = problem.candidates();
  plan.predicted = problem.evaluate(choice);
  plan.data_parallel = problem.evaluate(problem.data_parallel_choice());
  if (options.memory_limit_bytes > 0) {
    plan.fits = plan.predicted.memory_bytes() <= options.memory_limit_bytes;
  }
  problem.describe(choice, plan);
  plan.search_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return plan;
}

std::string AutoPlan::str(const Graph& g) const {
  std::ostringstream s;
  s << "AUTO_PARALLEL plan for " << devices << " devices (search " << search_mode_name(search);
  if (search == SearchMode::dynamic_programming)
    s << (exact ? ", optimal" : ", not proven optimal");
  s << "; " << candidates << " strategies weighed in " << search_seconds * 1e3 << " ms)\n";
  if (search != SearchMode::sharding_propagation) {
    s << "  eliminations: " << statistics.merge << " merge, " << statistics.contract
      << " contract, " << statistics.operator_eliminations << " operator, " << statistics.triangle
      << " triangle, " << statistics.edge << " edge";
    if (statistics.conditioned) s << ", " << statistics.conditioned << " nodes conditioned on";
    s << "\n";
  }
  s << "  cost model: " << machine << "\n";
  if (memory_limit_bytes > 0) {
    s << "  memory limit per rank: " << mib(memory_limit_bytes) << " MiB"
      << (lambda > 0 ? " (it binds: plans that use less memory were preferred)" : " (not binding)")
      << "\n";
  }
  for (NodeId id : g.schedule()) {
    auto it = ops.find(id);
    if (it == ops.end()) continue;
    const graph::Node& n = g.node(id);
    s << "  " << ops::op_name(n.op) << " %" << (n.outputs.empty() ? -1 : n.outputs[0]) << " "
      << g.value(n.outputs.at(0)).meta.shape.str() << ": " << ops::strategy_str(it->second.strategy)
      << " " << it->second.what << "\n";
    if (!it->second.why.empty()) s << "      " << it->second.why << "\n";
  }
  s << "  parameters:\n";
  for (const auto& [v, layout] : parameters) {
    const graph::Value& value = g.value(v);
    s << "    " << (value.name.empty() ? "%" + std::to_string(v) : value.name) << " "
      << value.meta.shape.str() << ": " << layout.str();
    if (!layout.is_replicated()) s << ", each rank holds " << layout.local_shape().str();
    s << "\n";
  }
  char line[200];
  s << "  per rank per step            this plan   data parallel\n";
  auto row = [&](const char* what, double a, double b, const char* unit) {
    std::snprintf(line, sizeof line, "    %-26s %9.3f %s %9.3f %s\n", what, a, unit, b, unit);
    s << line;
  };
  row("compute", predicted.compute_s * 1e3, data_parallel.compute_s * 1e3, "ms");
  row("communication", predicted.communication_s * 1e3, data_parallel.communication_s * 1e3, "ms");
  row("step", predicted.seconds() * 1e3, data_parallel.seconds() * 1e3, "ms");
  row("parameters, grads, state", mib(predicted.parameter_bytes),
      mib(data_parallel.parameter_bytes), "MiB");
  row("activations", mib(predicted.activation_bytes), mib(data_parallel.activation_bytes), "MiB");
  row("memory", mib(predicted.memory_bytes()), mib(data_parallel.memory_bytes()), "MiB");
  if (memory_limit_bytes > 0 && data_parallel.memory_bytes() > memory_limit_bytes) {
    s << "  data parallelism does not fit the memory limit\n";
  }
  if (!fits) s << "  this plan does not fit the memory limit\n";
  return s.str();
}

}  // namespace kiln::parallel
