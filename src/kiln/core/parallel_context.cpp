#include "kiln/core/parallel_context.h"

#include <cmath>

#include "kiln/core/error.h"

namespace kiln {
namespace {

AutoParallelContext& current_auto_parallel() {
  static AutoParallelContext c;
  return c;
}

}  // namespace

void set_auto_parallel_context(const AutoParallelContext& c) {
  if (c.device_num < 0) {
    throw Error(
        detail::concat("set_auto_parallel_context: device_num must be >= 0, got ", c.device_num));
  }
  if (c.global_rank < -1 || (c.device_num > 0 && c.global_rank >= c.device_num)) {
    throw Error(detail::concat("set_auto_parallel_context: global_rank ", c.global_rank,
                               " is outside [0, device_num ", c.device_num, ")"));
  }
  if (!std::isfinite(c.bucket_cap_mb) || c.bucket_cap_mb <= 0) {
    throw Error(detail::concat("set_auto_parallel_context: bucket_cap_mb must be > 0, got ",
                               c.bucket_cap_mb));
  }
  if (!std::isfinite(c.first_bucket_cap_mb) || c.first_bucket_cap_mb <= 0) {
    throw Error(detail::concat("set_auto_parallel_context: first_bucket_cap_mb must be > 0, got ",
                               c.first_bucket_cap_mb));
  }
  if (c.search_mode != "dynamic_programming" && c.search_mode != "recursive_programming" &&
      c.search_mode != "sharding_propagation") {
    throw Error("set_auto_parallel_context: search_mode '" + c.search_mode +
                "' is not one of dynamic_programming, recursive_programming, "
                "sharding_propagation");
  }
  if (c.op_times != "measured" && c.op_times != "estimated") {
    throw Error("set_auto_parallel_context: op_times '" + c.op_times +
                "' is not one of measured, estimated");
  }
  if (!std::isfinite(c.memory_limit_mb) || c.memory_limit_mb < 0) {
    throw Error(detail::concat("set_auto_parallel_context: memory_limit_mb must be >= 0, got ",
                               c.memory_limit_mb));
  }
  current_auto_parallel() = c;
}

const AutoParallelContext& get_auto_parallel_context() {
  return current_auto_parallel();
}

void reset_auto_parallel_context() {
  current_auto_parallel() = AutoParallelContext{};
}

std::string parallel_mode_name(ParallelMode mode) {
  switch (mode) {
    case ParallelMode::STAND_ALONE:
      return "stand_alone";
    case ParallelMode::DATA_PARALLEL:
      return "data_parallel";
    case ParallelMode::SEMI_AUTO_PARALLEL:
      return "semi_auto_parallel";
    case ParallelMode::AUTO_PARALLEL:
      return "auto_parallel";
  }
  return "?";
}

ParallelMode parse_parallel_mode(const std::string& name) {
  if (name == "stand_alone") return ParallelMode::STAND_ALONE;
  if (name == "data_parallel" || name == "data") return ParallelMode::DATA_PARALLEL;
  if (name == "semi_auto_parallel") return ParallelMode::SEMI_AUTO_PARALLEL;
  if (name == "auto_parallel" || name == "auto") return ParallelMode::AUTO_PARALLEL;
  throw Error("parallel mode '" + name +
              "' is not one of stand_alone, data_parallel (or data), semi_auto_parallel, "
              "auto_parallel (or auto)");
}

}  // namespace kiln
