#pragma once
// Inspection: the IR as text and as Graphviz DOT (render with `dot -Tsvg`). A fused kernel is
// one DOT node that lists the ops it replaced.
#include <string>

#include "kiln/graph/ir.h"

namespace kiln::graph {

// Writes <dir>/<stage>.txt and <dir>/<stage>.dot (creating dir); throws FileError on failure.
void dump(const Graph& graph, const std::string& dir, const std::string& stage);
// The DOT text alone.
std::string to_dot(const Graph& graph, const std::string& title);

}  // namespace kiln::graph
