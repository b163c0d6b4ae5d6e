#include "kiln/train/checkpoint.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "kiln/comm/communicator.h"
#include "kiln/core/error.h"
#include "kiln/parallel/semi_auto.h"
#include "kiln/train/safetensors.h"

namespace kiln::train {
namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 8; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 8) out += ", … (" + std::to_string(names.size()) + " in all)";
  return out;
}

}  // namespace

void save_checkpoint(const nn::Cell& net, const std::string& path, const SaveOptions& options) {
  std::vector<nn::NamedTensor> tensors = net.state_and_names();
  std::map<std::string, std::string> metadata = options.metadata;
  metadata["format"] = "kiln";
  metadata["epoch"] = std::to_string(options.epoch);
  metadata["step_in_epoch"] = std::to_string(options.step_in_epoch);
  if (options.optimizer) {
    for (auto& [n, t] : options.optimizer->state_and_names()) {
      tensors.emplace_back(kOptimizerPrefix + n, t);
    }
    metadata["optimizer"] = options.optimizer->name();
    metadata["global_step"] = std::to_string(options.optimizer->global_step());
  }
  if (parallel::semi_auto_active()) {
    // Each rank holds blocks of the split parameters: every rank gathers, rank 0 writes.
    tensors = parallel::gather_whole(tensors);
    if (comm::rank() != 0) return;
  }
  save_checkpoint(tensors, path, metadata);
}

std::vector<std::string> load_param_into_net(nn::Cell& net, const Checkpoint& checkpoint,
                                             bool strict_load) {
  std::unordered_map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : checkpoint.tensors) by_name.emplace(n, &t);
  std::vector<std::string> missing;
  std::set<std::string> used;
  // Check everything first so a bad checkpoint leaves the network untouched.
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  for (auto& [name, dst] : net.state_and_names()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& src = *it->second;
    if (src.shape() != dst.shape()) {
      throw ShapeError("load_param_into_net: '" + name + "' has shape " + dst.shape().str() +
                       " in the network but " + src.shape().str() + " in " + checkpoint.source);
    }
    if (is_floating(src.dtype()) != is_floating(dst.dtype())) {
      throw ShapeError("load_param_into_net: '" + name + "' is " + describe(dst) +
                       " in the network but " + describe(src) + " in " + checkpoint.source);
    }
    used.insert(name);
    copies.emplace_back(dst, &src);
  }
  if (strict_load) {
    if (!missing.empty()) {
      throw Error("load_param_into_net: " + checkpoint.source + " lacks " + join_names(missing));
    }
    std::vector<std::string> unexpected;
    for (const auto& [n, t] : checkpoint.tensors) {
      if (!used.count(n) && n.rfind(kOptimizerPrefix, 0) != 0) unexpected.push_back(n);
    }
    if (!unexpected.empty()) {
      throw Error("load_param_into_net: " + checkpoint.source +
                  " has entries the network lacks: " + join_names(unexpected));
    }
  }
  for (auto& [dst, src] : copies) dst.copy_from(*src);
  return missing;
}

void load_optimizer_state(optim::Optimizer& optimizer, const Checkpoint& checkpoint) {
  std::vector<nn::NamedTensor> state;
  std::string prefix = kOptimizerPrefix;
  for (const auto& [n, t] : checkpoint.tensors) {
    if (n.rfind(prefix, 0) == 0) state.emplace_back(n.substr(prefix.size()), t);
  }
  if (state.empty()) {
    throw Error("resume: " + checkpoint.source +
                " holds no optimizer state (was it saved with "
                "an optimizer?)");
  }
  auto it = checkpoint.metadata.find("optimizer");
  if (it != checkpoint.metadata.end() && it->second != optimizer.name()) {
    throw Error("resume: " + checkpoint.source + " holds " + it->second +
                " optimizer state, but the optimizer is " + optimizer.name());
  }
  try {
    optimizer.load_state(state);
  } catch (const ShapeError& e) {
    throw ShapeError(checkpoint.source + ": " + e.what());
  } catch (const Error& e) {
    throw Error(checkpoint.source + ": " + e.what());
  }
}

ResumePoint resume_from_checkpoint(const std::string& path, nn::Cell& net,
                                   optim::Optimizer& optimizer) {
  Checkpoint c = load_checkpoint(path);
  bool has_state = std::any_of(c.tensors.begin(), c.tensors.end(), [](const nn::NamedTensor& t) {
    return t.first.rfind(kOptimizerPrefix, 0) == 0;
  });
  if (!has_state) {
    throw Error("resume: " + c.source +
                " holds no optimizer state (was it saved with an optimizer?)");
  }
  ResumePoint p = read_training_state(c);
  // Each of these checks all its entries before copying any.
  load_param_into_net(net, c, /*strict_load=*/true);
  load_optimizer_state(optimizer, c);
  return p;
}

}  // namespace kiln::train
