// Walks the whole op table: every entry must declare what every feature needs.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "kiln/ops/op.h"

namespace kiln::ops {
namespace {

bool is_elementwise(OpKind k) {
  // The elementwise block of op_list.h: add … sign.
  return size_t(k) <= size_t(OpKind::sign);
}

TEST(OpTable, EveryEntryIsComplete) {
  std::string pending;
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpKind kind = OpKind(i);
    const OpDef& def = op_def(kind);
    SCOPED_TRACE(std::string(def.name));
    // TEMPORARY: entries still held by a src/kiln/ops/pending_*.cpp placeholder declare nothing
    // but a name and a throwing infer. Skip them; this skip goes away when the pending files are
    // deleted.
    if (!def.kernel && !def.view && !def.grad && !def.cost) {
      pending += " " + std::string(def.name);
      continue;
    }
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
  if (!pending.empty()) std::cout << "[ pending  ] ops still placeholders:" << pending << "\n";
}

}  // namespace
}  // namespace kiln::ops
