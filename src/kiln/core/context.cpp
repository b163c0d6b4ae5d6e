#include "kiln/core/context.h"

#include <string>

#include "kiln/core/error.h"

namespace kiln {
namespace {
Context& current() {
  static Context c;
  return c;
}
}  // namespace

void set_context(const Context& context) {
  if (context.device_target != "CPU") {
    throw Error("set_context: device_target '" + context.device_target +
                "' is not available (Kiln runs on CPU)");
  }
  if (context.micro_batches < 1) {
    throw Error("set_context: micro_batches is " + std::to_string(context.micro_batches) +
                ", must be at least 1");
  }
  if (context.conv_algorithm != "auto" && context.conv_algorithm != "direct" &&
      context.conv_algorithm != "winograd") {
    throw Error("set_context: conv_algorithm '" + context.conv_algorithm +
                "' is not one of auto, direct, winograd");
  }
  current() = context;
}

const Context& get_context() {
  return current();
}

}  // namespace kiln
