#include "kiln/graph/dump.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/core/error.h"

namespace kiln::graph {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw FileError("graph dump: cannot open " + path + " for writing");
  f << text;
  if (!f) throw FileError("graph dump: write to " + path + " failed");
}

}  // namespace

std::string to_dot(const Graph& g, const std::string& title) {
  std::ostringstream s;
  s << "digraph \"" << escape(title)
    << "\" {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  std::vector<bool> shown(g.num_values());
  auto value_node = [&](ValueId v) {
    if (shown[size_t(v)]) return;
    shown[size_t(v)] = true;
    const Value& val = g.value(v);
    const char* color = val.kind == ValueKind::input   ? "lightblue"
                        : val.kind == ValueKind::state ? "khaki"
                                                       : "lightgrey";
    s << "  v" << v << " [shape=ellipse, style=filled, fillcolor=" << color << ", label=\"%" << v;
    if (!val.name.empty()) s << ' ' << escape(val.name);
    s << "\\n" << ops::describe_meta(val.meta) << "\"];\n";
  };
  for (NodeId n : g.schedule()) {
    const Node& node = g.node(n);
    // Nodes a pass adds that stand for no traced op: a layout reorder, a relu mask.
    const bool added = node.type == NodeType::reorder || node.type == NodeType::relu_mask;
    const bool fused = node.type != NodeType::op && !added;
    s << "  n" << n << " [shape=box, style=\"filled" << (fused ? ",bold" : "") << "\", fillcolor="
      << (fused                    ? "salmon"
          : added                  ? "palegreen"
          : has_side_effects(node) ? "orange"
                                   : "white")
      << ", label=\"";
    if (fused) {
      s << "fused kernel";
      for (const std::string& m : node.members) s << "\\n" << escape(m);
    } else {
      s << escape(node_label(node));
    }
    s << "\"];\n";
    for (ValueId v : node.inputs) {
      if (v == kNoValue) continue;
      const Value& val = g.value(v);
      if (val.kind == ValueKind::intermediate && val.producer >= 0) {
        // Values the layout pass keeps blocked (passes/block_layout.cpp) say so on their edge.
        const bool blocked = output_is_nchw16c(g.node(val.producer), val.output_index);
        s << "  n" << val.producer << " -> n" << n << " [label=\"%" << v
          << (blocked ? " nChw16c" : "") << "\"];\n";
      } else {
        value_node(v);
        s << "  v" << v << " -> n" << n << ";\n";
      }
    }
  }
  s << "  out [shape=doublecircle, label=\"return\"];\n";
  for (ValueId v : g.outputs()) {
    const Value& val = g.value(v);
    if (val.kind == ValueKind::intermediate && val.producer >= 0) {
      s << "  n" << val.producer << " -> out;\n";
    } else {
      value_node(v);
      s << "  v" << v << " -> out;\n";
    }
  }
  s << "}\n";
  return s.str();
}

void dump(const Graph& graph, const std::string& dir, const std::string& stage) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw FileError("graph dump: cannot create directory " + dir + ": " + ec.message());
  write_file(dir + "/" + stage + ".txt", graph.str());
  write_file(dir + "/" + stage + ".dot", to_dot(graph, stage));
}

}  // namespace kiln::graph
