#include "kiln/ops/shard_rule.h"

#include <sstream>

#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"

namespace kiln::ops {
namespace {

thread_local ShardScope* t_scope = nullptr;

std::string parts_str(const std::vector<int64_t>& parts) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < parts.size(); ++i) s << (i ? ", " : "") << parts[i];
  if (parts.size() == 1) s << ",";
  s << ")";
  return s.str();
}

[[noreturn]] void refuse_strategy(OpKind kind, std::span<const TensorMeta> inputs,
                                  const Strategy& s, const std::string& why) {
  throw ShapeError(std::string(op_name(kind)) + ": strategy " + strategy_str(s) + " for inputs " +
                   describe_metas(inputs) + " does not fit: " + why);
}

}  // namespace

std::string strategy_str(const Strategy& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + parts_str(s[i]);
  if (s.size() == 1) out += ",";
  return out + ")";
}

Strategy replicated_strategy(std::span<const TensorMeta> inputs) {
  Strategy s;
  for (const TensorMeta& m : inputs) s.emplace_back(size_t(m.shape.rank()), 1);
  return s;
}

bool is_replicated(const Strategy& strategy) {
  for (const auto& parts : strategy) {
    for (int64_t p : parts) {
      if (p != 1) return false;
    }
  }
  return true;
}

ShardedForm shard_form(OpKind kind, std::span<const TensorMeta> inputs, const Attrs& attrs,
                       const Strategy& strategy, int64_t device_num) {
  const OpDef& def = op_def(kind);
  if (strategy.size() != inputs.size()) {
    refuse_strategy(kind, inputs, strategy,
                    detail::concat("it gives ", strategy.size(), " inputs' parts for ",
                                   inputs.size(), " inputs"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Shape& shape = inputs[i].shape;
    if (int64_t(strategy[i].size()) != shape.rank()) {
      refuse_strategy(
          kind, inputs, strategy,
          detail::concat("input ", i, " has ", shape.rank(), " dimensions but its parts ",
                         parts_str(strategy[i]), " have ", strategy[i].size()));
    }
    for (int d = 0; d < shape.rank(); ++d) {
      const int64_t p = strategy[i][size_t(d)];
      if (p < 1) {
        refuse_strategy(
            kind, inputs, strategy,
            detail::concat("input ", i, " dimension ", d, " has ", p, " parts; parts are >= 1"));
      }
      if (shape[d] % p != 0) {
        refuse_strategy(kind, inputs, strategy,
                        detail::concat(p, " parts do not divide input ", i, "'s dimension ", d,
                                       " of ", shape[d]));
      }
    }
  }
  ShardedForm form;
  if (!def.shard) {
    if (!is_replicated(strategy)) {
      refuse_strategy(kind, inputs, strategy,
                      std::string("the op has no shard rule and runs replicated (") +
                          (def.no_shard_reason ? def.no_shard_reason : "no reason given") +
                          "); give it no strategy or all ones");
    }
    for (const TensorMeta& m : inputs) {
      form.input_maps.emplace_back(size_t(m.shape.rank()), kNotSplit);
    }
    for (const TensorMeta& m : infer(kind, inputs, attrs)) {
      form.output_maps.emplace_back(size_t(m.shape.rank()), kNotSplit);
      form.output_partial.emplace_back();
    }
    form.local_attrs = attrs;
  } else {
    try {
      form = def.shard->form(inputs, attrs, strategy);
    } catch (const ShapeError& e) {
      refuse_strategy(kind, inputs, strategy,
                      std::string(e.what()) + " (the rule accepts " + def.shard->accepts + ")");
    }
  }
  int64_t devices = 1;
  for (int64_t p : form.device_matrix) devices *= p;
  if (device_num > 0 && (devices > device_num || device_num % devices != 0)) {
    refuse_strategy(kind, inputs, strategy,
                    detail::concat("it needs ", devices, " devices, which do not divide the ",
                                   device_num, " devices of the job (device_num)"));
  }
  return form;
}

Cost sharded_cost(OpKind kind, std::span<const TensorMeta> inputs, const Attrs& attrs,
                  const ShardedForm& form) {
  const OpDef& def = op_def(kind);
  if (!def.cost) return {};
  const std::vector<TensorMeta> outputs = infer(kind, inputs, attrs);
  Cost c = def.cost(inputs, outputs, attrs);
  double shards = 1;
  for (int64_t p : form.device_matrix) shards *= double(p);
  return {c.flops / shards, c.bytes / shards};
}

ShardScope::ShardScope(OpKind kind, Strategy strategy)
    : previous_(t_scope), kind_(kind), strategy_(std::move(strategy)) {
  t_scope = this;
}

ShardScope::~ShardScope() {
  // Unlink this scope wherever it is in the chain (scopes held in a container may end in any
  // order).
  if (t_scope == this) {
    t_scope = previous_;
    return;
  }
  for (ShardScope* s = t_scope; s; s = s->previous_) {
    if (s->previous_ == this) {
      s->previous_ = previous_;
      return;
    }
  }
}

const Strategy* scoped_strategy(OpKind kind) {
  for (const ShardScope* s = t_scope; s; s = s->previous_) {
    if (s->kind_ == kind) return &s->strategy_;
  }
  return nullptr;
}

}  // namespace kiln::ops
