#include "kiln/core/context.h"

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
  current() = context;
}

const Context& get_context() {
  return current();
}

}  // namespace kiln
