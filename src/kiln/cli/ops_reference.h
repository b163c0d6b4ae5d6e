#pragma once
// The op table as a reference for users (`kiln info --ops`, docs/ops.md): one row per op of
// ops/op_list.h with what its OpDef declares, so the reference cannot go stale (a ctest compares
// docs/ops.md with it).
#include <string>

namespace kiln::cli {

// A markdown document: a heading, how to read the table, and the table.
std::string ops_reference_markdown();

}  // namespace kiln::cli
