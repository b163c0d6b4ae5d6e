#include "kiln/cli/plan_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/cli/data_spec.h"
#include "kiln/cli/option_checks.h"
#include "kiln/core/error.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/ops/dispatch.h"
#include "kiln/parallel/auto_parallel.h"
#include "kiln/parallel/semi_auto.h"
#include "kiln/parallel/sharding_plan.h"
#include "kiln/train/machine_model_file.h"

namespace kiln::cli {
namespace {

constexpr int64_t kMaxDevices = 1024;

struct PlanConfig {
  std::string model = "mlp";
  int64_t devices = 2;
  int64_t batch_size = 64;  // the global batch: every device's share of it is planned
  double memory_limit_mb = 0;
  std::string search = "dynamic_programming";
  // The cluster planned for need not be this machine, so ops are estimated unless asked.
  std::string op_times = "estimated";
  std::string optimizer = "momentum";
  std::string image_size;  // "HxW": the model's input (default: the zoo's, 28x28)
  int64_t channels = 1;
  int64_t classes = 10;
  int64_t context = 64;         // gpt
  bool redistributions = true;  // the list of inserted collectives (--no-redistributions hides it)
  bool layouts = false;         // every op's input and output layouts besides
  bool json = false;
};

int optimizer_states(const std::string& optimizer) {
  if (optimizer == "sgd") return 0;
  if (optimizer == "momentum") return 1;
  if (optimizer == "adam" || optimizer == "adamw") return 2;
  throw Error("kiln plan: --optimizer " + optimizer + " is not one of sgd, momentum, adam, adamw");
}

nlohmann::ordered_json prediction_json(const parallel::StepPrediction& p) {
  return {{"step_ms", p.seconds() * 1e3},
          {"compute_ms", p.compute_s * 1e3},
          {"communication_ms", p.communication_s * 1e3},
          {"parameter_mib", p.parameter_bytes / double(1 << 20)},
          {"activation_mib", p.activation_bytes / double(1 << 20)},
          {"memory_mib", p.memory_bytes() / double(1 << 20)}};
}

std::string value_ref(const graph::Graph& g, graph::ValueId v) {
  const graph::Value& value = g.value(v);
  return "%" + std::to_string(v) + (value.name.empty() ? "" : " " + value.name);
}

std::string op_ref(const graph::Graph& g, graph::NodeId id) {
  const graph::Node& n = g.node(id);
  return std::string(ops::op_name(n.op)) + " %" +
         std::to_string(n.outputs.empty() ? -1 : n.outputs[0]);
}

nlohmann::ordered_json redistributions_json(
    const graph::Graph& g, const std::vector<parallel::InsertedRedistribution>& inserted) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& r : inserted) {
    const graph::ValueId v = g.node(r.op).inputs[r.input];
    nlohmann::ordered_json steps = nlohmann::ordered_json::array();
    for (const parallel::RedistributionStep& s : r.redistribution.steps) {
      steps.push_back(
          {{"step", s.brief()}, {"group_size", s.group.size()}, {"estimate_us", s.seconds * 1e6}});
    }
    list.push_back({{"op", op_ref(g, r.op)},
                    {"input", r.input},
                    {"value", value_ref(g, v)},
                    {"shape", g.value(v).meta.shape.str()},
                    {"steps", steps},
                    {"estimate_us", r.redistribution.seconds * 1e6}});
  }
  return list;
}

// One line per redistribution, with the group's size rather than its ranks: a plan for 1,024
// devices stays readable.
void print_redistributions(const graph::Graph& g,
                           const std::vector<parallel::InsertedRedistribution>& inserted,
                           double seconds) {
  std::cout << "  redistributions rank 0 inserts in the forward (the backward mirrors each; "
               "--no-redistributions hides them):\n";
  if (inserted.empty()) std::cout << "    none: every op reads its inputs as they are held\n";
  char estimate[64];
  for (const auto& r : inserted) {
    const graph::ValueId v = g.node(r.op).inputs[r.input];
    std::snprintf(estimate, sizeof estimate, " (~%.1f us)", r.redistribution.seconds * 1e6);
    std::cout << "    " << op_ref(g, r.op) << " input " << r.input << " (" << value_ref(g, v) << " "
              << g.value(v).meta.shape.str() << "): " << r.redistribution.brief() << estimate
              << "\n";
  }
  std::snprintf(estimate, sizeof estimate, "%.3f", seconds * 1e3);
  std::cout << "    " << inserted.size() << " redistributions, ~" << estimate
            << " ms per step in the forward (alpha-beta model)\n";
}

void run_plan(const PlanConfig& c) {
  models::ModelConfig mc{.num_classes = c.classes, .in_channels = c.channels};
  if (!c.image_size.empty()) {
    std::tie(mc.image_height, mc.image_width) = parse_image_size(c.image_size, "--image-size");
  }
  const bool language = models::is_language_model(c.model);
  if (language) {
    mc.context_length = c.context;
    if (c.classes == 10) mc.num_classes = 256;  // the byte vocabulary of kiln train --model gpt
  }
  const std::shared_ptr<nn::Cell> net = models::create(c.model, mc);
  const ops::TensorMeta images =
      language
          ? ops::TensorMeta{Shape({c.batch_size, c.context}), DType::i32}
          : ops::TensorMeta{Shape({c.batch_size, mc.in_channels, mc.image_height, mc.image_width}),
                            DType::f32};
  const ops::TensorMeta labels = language
                                     ? ops::TensorMeta{Shape({c.batch_size, c.context}), DType::i32}
                                     : ops::TensorMeta{Shape({c.batch_size}), DType::i32};
  nn::SoftmaxCrossEntropyWithLogits loss(true, "mean");
  const auto step = parallel::trace_logical_step(
      images, labels,
      [&](const Tensor& x, const Tensor& y) {
        Tensor logits = net->construct(x);
        return std::make_pair(logits, loss.construct(logits, y));
      },
      net->state_and_names());

  parallel::AutoParallelOptions options;
  options.search = parallel::parse_search_mode(c.search);
  options.memory_limit_bytes = c.memory_limit_mb * double(1 << 20);
  options.optimizer_states = optimizer_states(c.optimizer);
  options.machine = train::planning_machine_model(c.op_times == "measured");
  const parallel::AutoPlan plan =
      parallel::plan_auto_parallel(step->graph, step->loss, c.devices, options);

  // The plan as a compile would run it: the redistributions rank 0 inserts before each op.
  graph::Graph g = step->graph;
  std::map<graph::NodeId, std::string> searched;
  const std::map<graph::ValueId, parallel::TensorLayout> layouts(plan.parameters.begin(),
                                                                 plan.parameters.end());
  for (const auto& [id, choice] : plan.ops) {
    g.node(id).strategy = choice.strategy;
    searched[id] = choice.what;
  }
  const parallel::ShardingPlan sharding =
      parallel::plan_sharding(g, c.devices, layouts, options.machine.comm, searched);
  const std::vector<parallel::InsertedRedistribution> inserted =
      sharding.redistributions(g, 0, options.machine.comm);
  double redistribution_s = 0;
  for (const auto& r : inserted) redistribution_s += r.redistribution.seconds;

  if (c.json) {
    nlohmann::ordered_json j;
    j["model"] = c.model;
    j["devices"] = c.devices;
    j["batch_size"] = c.batch_size;
    j["search"] = c.search;
    j["optimal"] = plan.exact;
    j["search_ms"] = plan.search_seconds * 1e3;
    j["strategies_weighed"] = plan.candidates;
    j["memory_limit_mib"] = c.memory_limit_mb;
    j["fits"] = plan.fits;
    j["cost_model"] = plan.machine;
    j["predicted"] = prediction_json(plan.predicted);
    j["data_parallel"] = prediction_json(plan.data_parallel);
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (graph::NodeId id : step->graph.schedule()) {
      auto it = plan.ops.find(id);
      if (it == plan.ops.end()) continue;
      list.push_back({{"op", ops::op_name(step->graph.node(id).op)},
                      {"strategy", ops::strategy_str(it->second.strategy)},
                      {"what", it->second.what},
                      {"why", it->second.why}});
    }
    j["ops"] = list;
    nlohmann::ordered_json params = nlohmann::ordered_json::object();
    for (const auto& [v, layout] : plan.parameters) {
      params[step->graph.value(v).name] = layout.str();
    }
    j["parameters"] = params;
    j["redistributions"] = redistributions_json(g, inserted);
    j["redistribution_forward_ms"] = redistribution_s * 1e3;
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << c.model << ", batch " << c.batch_size << " (global), optimizer " << c.optimizer
            << "\n"
            << plan.str(step->graph);
  if (c.redistributions) print_redistributions(g, inserted, redistribution_s);
  if (c.layouts) std::cout << sharding.str(g, 0, options.machine.comm);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "AUTO_PARALLEL's plan of a model's training step for N devices, with no ranks "
      "running: each op's strategy, the redistributions inserted, the predicted step and "
      "memory per rank");
  auto c = std::make_shared<PlanConfig>();
  cmd->add_option("--model", c->model, "A zoo model (kiln train --model)")
      ->check(CLI::IsMember(models::model_names()));
  cmd->add_option("--devices", c->devices, "Ranks to plan for (1 to 1024)")
      ->check(integer_in(1, kMaxDevices));
  cmd->add_option("--batch-size", c->batch_size, "The global batch (all ranks together)")
      ->check(integer_in(1, int64_t(1) << 24));
  cmd->add_option("--memory-limit,--memory-limit-mb", c->memory_limit_mb,
                  "Memory per rank for parameters, gradients, optimizer state and activations "
                  "(MiB; 0: no limit)")
      ->check(finite_in(0, 1e9, true));
  cmd->add_option("--search", c->search, "How strategies are chosen")
      ->check(
          CLI::IsMember({"dynamic_programming", "recursive_programming", "sharding_propagation"}));
  cmd->add_option("--op-times", c->op_times,
                  "How each op's time is found: estimated (its FLOPs and bytes at the machine's "
                  "peaks, instantly) or measured (its forward and backward timed here at every "
                  "strategy's local shapes: closer to a step on this machine, seconds per model)")
      ->check(CLI::IsMember({"estimated", "measured"}));
  cmd->add_option("--optimizer", c->optimizer, "Sets the optimizer state per parameter")
      ->check(CLI::IsMember({"sgd", "momentum", "adam", "adamw"}));
  cmd->add_option("--image-size", c->image_size, "The input's HxW (default 28x28)");
  cmd->add_option("--channels", c->channels, "The input's channels")->check(integer_in(1, 4096));
  cmd->add_option("--classes", c->classes, "Classes (gpt: the vocabulary, default 256)")
      ->check(integer_in(1, int64_t(1) << 24));
  cmd->add_option("--context", c->context, "gpt: tokens per window")->check(integer_in(1, 1 << 16));
  cmd->add_flag("--redistributions,!--no-redistributions", c->redistributions,
                "Print the collectives rank 0 inserts before each op (the default; "
                "--no-redistributions hides them)");
  cmd->add_flag("--layouts", c->layouts,
                "Also print every op's input and output layouts as a compile runs them");
  cmd->add_flag("--json", c->json, "Print the plan as one JSON object");
  cmd->callback([c] {
    if (c->batch_size % c->devices != 0 && c->batch_size < c->devices) {
      std::cerr << "kiln plan: note: --batch-size " << c->batch_size << " is smaller than "
                << "--devices " << c->devices << ": the batch cannot be split over every device\n";
    }
    run_plan(*c);
  });
}

}  // namespace kiln::cli
