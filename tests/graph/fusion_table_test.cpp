// The fusion table (graph/fusion_list.h): every entry complete, the report counting by name,
// and fusions turned off by name.
#include <set>
#include <string>

#include "graph_test_util.h"
#include "kiln/core/error.h"
#include "kiln/graph/fusions.h"

namespace kiln::graph::fusion_table_test {
namespace {
using namespace testing;

TEST(FusionTable, EveryFusionHasItsPassAndEveryFusedNodeTypeItsFusionAndKernel) {
  std::set<std::string_view> names, making;
  for (const FusionDef& fusion : fusion_table()) {
    EXPECT_FALSE(fusion.name.empty());
    EXPECT_NE(fusion.pass, nullptr) << fusion.name;
    EXPECT_TRUE(names.insert(fusion.name).second) << fusion.name << " listed twice";
    EXPECT_EQ(find_fusion(fusion.name), &fusion);
  }
  // Every node type but the op table's and the layout passes' is made by a listed fusion.
  const std::set<NodeType> not_fused{NodeType::op, NodeType::reorder, NodeType::relu_mask};
  int fused_types = 0;
  for (int t = 0; t < 256; ++t) {
    const FusedNodeDef* def = fused_node_def(NodeType(t));
    if (not_fused.count(NodeType(t)) != 0) {
      EXPECT_EQ(def, nullptr) << "node type " << t;
      continue;
    }
    if (def == nullptr) break;  // past the last node type
    ++fused_types;
    EXPECT_EQ(int(def->type), t);
    EXPECT_NE(def->kernel, nullptr) << "node type " << t;
    EXPECT_NE(find_fusion(def->fusion), nullptr) << def->fusion;
    making.insert(def->fusion);
  }
  EXPECT_GE(fused_types, int(fusion_table().size()));
  EXPECT_EQ(making, names) << "a fusion that makes no node type";
  EXPECT_EQ(find_fusion("no_such_fusion"), nullptr);
}

TEST(FusionTable, ReportCountsEveryNameAtZeroWithoutFusionAndRefusesOthers) {
  CompileReport report;
  ASSERT_FALSE(fusion_count_names().empty());
  for (std::string_view name : fusion_count_names()) EXPECT_EQ(report.fused(name), 0) << name;
  EXPECT_EQ(report.fused("recording_pools"), 0);
  try {
    report.fused("bn+relu");
    ADD_FAILURE() << "an unknown count name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'bn+relu'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bn_relu"), std::string::npos) << e.what();
  }
}

GraphFn elementwise_chain() {
  return [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::relu(ops::add_scalar(ops::mul(in[0], in[1]), 0.5))};
  };
}

TEST(FusionTable, AFusionDisabledByNameMakesNoNodesAndTheOthersStillRun) {
  std::vector<Tensor> in{random_tensor({16, 24}, 1), random_tensor({16, 24}, 2)};
  Compiled on = compile_and_run(elementwise_chain(), in, {.fusion = true});
  EXPECT_EQ(on.exe->report().fused("elementwise"), 1);
  EXPECT_EQ(count_nodes(on.exe->graph(), NodeType::fused_elementwise), 1);

  Compiled off = compile_and_run(elementwise_chain(), in,
                                 {.fusion = true, .disabled_fusions = {"elementwise"}});
  EXPECT_EQ(off.exe->report().fused("elementwise"), 0);
  EXPECT_EQ(count_nodes(off.exe->graph(), NodeType::fused_elementwise), 0);
  EXPECT_EQ(off.exe->graph().num_live_nodes(), 3u);
  expect_all_close(off.outputs, on.outputs, 1e-6, 1e-6, "disabled vs fused");

  // Disabling another fusion leaves this one alone.
  Compiled other = compile_and_run(elementwise_chain(), in,
                                   {.fusion = true, .disabled_fusions = {"bn_relu", "epilogues"}});
  EXPECT_EQ(other.exe->report().fused("elementwise"), 1);
}

TEST(FusionTable, AnUnknownFusionNameIsAnErrorListingTheFusions) {
  std::vector<Tensor> in{random_tensor({4, 4}, 1), random_tensor({4, 4}, 2)};
  try {
    compile_and_run(elementwise_chain(), in, {.fusion = true, .disabled_fusions = {"elementwize"}});
    ADD_FAILURE() << "an unknown fusion name was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'elementwize'"), std::string::npos) << what;
    EXPECT_NE(what.find("elementwise"), std::string::npos) << what;
    EXPECT_NE(what.find("pooled_conv_grad"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace kiln::graph::fusion_table_test
