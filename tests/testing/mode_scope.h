#pragma once
// Runs one scope with the context changed (an execution mode and graph-kernel fusion, or a
// convolution algorithm), restoring the caller's context however the scope ends.
#include <functional>
#include <string>

#include "kiln/core/context.h"

namespace kiln::testing {

// The context as `edit` leaves it, for one scope.
class ContextScope {
 public:
  explicit ContextScope(const std::function<void(Context&)>& edit) : saved_(get_context()) {
    Context c = saved_;
    edit(c);
    set_context(c);
  }
  ~ContextScope() { set_context(saved_); }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  Context saved_;
};

class ModeScope : public ContextScope {
 public:
  ModeScope(ExecutionMode mode, bool fusion)
      : ContextScope([&](Context& c) {
          c.mode = mode;
          c.enable_graph_kernel = fusion;
        }) {}
};

// Context::conv_algorithm ("auto", "direct", "winograd") for one scope.
class ConvAlgorithmScope : public ContextScope {
 public:
  explicit ConvAlgorithmScope(const std::string& algorithm)
      : ContextScope([&](Context& c) { c.conv_algorithm = algorithm; }) {}
};

}  // namespace kiln::testing
