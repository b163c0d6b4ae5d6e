// Walks the whole op table: every entry must declare what every feature needs.
#include <gtest/gtest.h>

#include <string>

#include "kiln/ops/op.h"

namespace kiln::ops::op_table_test {
namespace {

TEST(OpTable, EveryEntryIsComplete) {
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpKind kind = OpKind(i);
    const OpDef& def = op_def(kind);
    SCOPED_TRACE(std::string(def.name));
    EXPECT_FALSE(def.name.empty());
    EXPECT_EQ(op_by_name(def.name), kind) << "names must be unique";
    EXPECT_NE(def.infer, nullptr) << def.name << " lacks infer";
    EXPECT_TRUE(def.kernel || def.view) << def.name << " lacks both kernel and view";
    EXPECT_FALSE(def.kernel && def.view) << def.name << " has both kernel and view";
    EXPECT_TRUE(def.grad || def.no_grad_reason) << def.name << " lacks grad and no_grad_reason";
    EXPECT_NE(def.cost, nullptr) << def.name << " lacks cost";
    if (is_elementwise(kind)) {
      EXPECT_NE(def.tile, nullptr) << def.name << " lacks tile";
    }
  }
}

}  // namespace
}  // namespace kiln::ops::op_table_test
