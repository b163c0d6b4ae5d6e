#pragma once
// Runs one scope in an execution mode (and with graph-kernel fusion on or off), or with a
// convolution algorithm, restoring the caller's context however the scope ends.
#include <string>

#include "kiln/core/context.h"

namespace kiln::testing {

class ModeScope {
 public:
  ModeScope(ExecutionMode mode, bool fusion) : saved_(get_context()) {
    Context c = saved_;
    c.mode = mode;
    c.enable_graph_kernel = fusion;
    set_context(c);
  }
  ~ModeScope() { set_context(saved_); }
  ModeScope(const ModeScope&) = delete;
  ModeScope& operator=(const ModeScope&) = delete;

 private:
  Context saved_;
};

// Context::conv_algorithm ("auto", "direct", "winograd") for one scope.
class ConvAlgorithmScope {
 public:
  explicit ConvAlgorithmScope(const std::string& algorithm) : saved_(get_context()) {
    Context c = saved_;
    c.conv_algorithm = algorithm;
    set_context(c);
  }
  ~ConvAlgorithmScope() { set_context(saved_); }
  ConvAlgorithmScope(const ConvAlgorithmScope&) = delete;
  ConvAlgorithmScope& operator=(const ConvAlgorithmScope&) = delete;

 private:
  Context saved_;
};

}  // namespace kiln::testing
