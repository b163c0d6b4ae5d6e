#include "kiln/graph/fusions.h"

#include <algorithm>
#include <array>
#include <string>

#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph {
namespace {

// A fusion listed without its pass `passes::fuse_<name>`, a node type without its kernel, or a
// flag CompileOptions lacks: a compile error here (a declared but undefined one: a link error).
#define KILN_FUSION_ROW(name, flag) FusionDef{#name, &passes::fuse_##name, &CompileOptions::flag},
constexpr FusionDef kFusions[] = {KILN_FOR_EACH_FUSION(KILN_FUSION_ROW)};
#undef KILN_FUSION_ROW

#define KILN_FUSED_NODE_ROW(type, fusion, counted_as, kernel) \
  FusedNodeDef{NodeType::type, #fusion,                       \
               #counted_as == std::string_view("uncounted") ? "" : #counted_as, &kernel},
constexpr FusedNodeDef kFusedNodes[] = {KILN_FOR_EACH_FUSED_NODE(KILN_FUSED_NODE_ROW)};
#undef KILN_FUSED_NODE_ROW

constexpr bool every_node_type_names_a_listed_fusion() {
  for (const FusedNodeDef& node : kFusedNodes) {
    if (std::none_of(std::begin(kFusions), std::end(kFusions),
                     [&](const FusionDef& f) { return f.name == node.fusion; })) {
      return false;
    }
  }
  return true;
}
static_assert(every_node_type_names_a_listed_fusion(),
              "fusion_list.h: a fused node type names a fusion KILN_FOR_EACH_FUSION lacks");

constexpr bool every_fusion_makes_a_node_type() {
  for (const FusionDef& f : kFusions) {
    if (std::none_of(std::begin(kFusedNodes), std::end(kFusedNodes),
                     [&](const FusedNodeDef& n) { return n.fusion == f.name; })) {
      return false;
    }
  }
  return true;
}
static_assert(every_fusion_makes_a_node_type(),
              "fusion_list.h: a fusion makes no node type of KILN_FOR_EACH_FUSED_NODE");

constexpr bool fusion_names_unique() {
  for (size_t i = 0; i < std::size(kFusions); ++i) {
    for (size_t j = i + 1; j < std::size(kFusions); ++j) {
      if (kFusions[i].name == kFusions[j].name) return false;
    }
  }
  return true;
}
static_assert(fusion_names_unique(), "fusion_list.h: a fusion is listed twice");

// The fused node types follow op, reorder and relu_mask in NodeType, in the list's order.
constexpr size_t kFirstFusedType = size_t(NodeType::relu_mask) + 1;
constexpr bool rows_follow_node_types() {
  for (size_t i = 0; i < std::size(kFusedNodes); ++i) {
    if (size_t(kFusedNodes[i].type) != kFirstFusedType + i) return false;
  }
  return true;
}
static_assert(rows_follow_node_types());

// The report's counts: each counted_as once, in the order of first appearance.
constexpr size_t count_names_size() {
  size_t n = 0;
  for (size_t i = 0; i < std::size(kFusedNodes); ++i) {
    bool first = !kFusedNodes[i].counted_as.empty();
    for (size_t j = 0; j < i; ++j)
      first = first && kFusedNodes[j].counted_as != kFusedNodes[i].counted_as;
    n += first ? 1 : 0;
  }
  return n;
}
constexpr auto kCountNames = [] {
  std::array<std::string_view, count_names_size()> names{};
  size_t n = 0;
  for (const FusedNodeDef& node : kFusedNodes) {
    if (node.counted_as.empty()) continue;
    if (std::find(names.begin(), names.begin() + n, node.counted_as) == names.begin() + n) {
      names[n++] = node.counted_as;
    }
  }
  return names;
}();

std::string fusion_names() {
  std::string s;
  for (const FusionDef& f : kFusions) s += (s.empty() ? "" : ", ") + std::string(f.name);
  return s;
}

}  // namespace

std::span<const FusionDef> fusion_table() {
  return kFusions;
}

const FusionDef* find_fusion(std::string_view name) {
  for (const FusionDef& f : kFusions) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const FusedNodeDef* fused_node_def(NodeType type) {
  const size_t i = size_t(type) - kFirstFusedType;
  return size_t(type) >= kFirstFusedType && i < std::size(kFusedNodes) ? &kFusedNodes[i] : nullptr;
}

std::span<const std::string_view> fusion_count_names() {
  return kCountNames;
}

bool fusion_enabled(const FusionDef& fusion, const CompileOptions& options) {
  return options.fusion && options.*fusion.switched_by &&
         std::find(options.disabled_fusions.begin(), options.disabled_fusions.end(), fusion.name) ==
             options.disabled_fusions.end();
}

void check_fusion_names(const CompileOptions& options) {
  for (const std::string& name : options.disabled_fusions) {
    if (find_fusion(name) == nullptr) {
      throw Error("CompileOptions::disabled_fusions: no fusion is named '" + name +
                  "' (the fusions: " + fusion_names() + ")");
    }
  }
}

}  // namespace kiln::graph
