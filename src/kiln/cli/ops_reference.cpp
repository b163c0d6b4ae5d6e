#include "kiln/cli/ops_reference.h"

#include <sstream>

#include "kiln/ops/dispatch.h"
#include "kiln/ops/op.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::cli {
namespace {

std::string count(int n, int optional = 0) {
  if (n < 0) return "any";
  return optional > 0 ? std::to_string(n - optional) + "–" + std::to_string(n) : std::to_string(n);
}

// A table cell: no line breaks, and '|' escaped.
std::string cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

const char* amp_name(ops::AmpClass c) {
  switch (c) {
    case ops::AmpClass::low_precision:
      return "low precision";
    case ops::AmpClass::fp32:
      return "fp32";
    case ops::AmpClass::follow:
      return "follows inputs";
  }
  return "?";
}

}  // namespace

std::string ops_reference_markdown() {
  std::ostringstream s;
  s << "# Kiln's operators\n\n"
       "Generated from the op table (`src/kiln/ops/op_list.h`, one `OpDef` per op) by\n"
       "`kiln info --ops`; a test fails when this file and the table differ. Columns:\n\n"
       "- **in / out**: how many tensors the op takes and makes;\n"
       "- **attributes**: its attribute family (`src/kiln/ops/attrs.h`);\n"
       "- **gradient**: whether the op has a gradient rule (shared by eager and graph mode), or "
       "why "
       "not;\n"
       "- **AMP**: under O1 and O2, whether it runs in low precision, stays fp32, or follows its "
       "inputs;\n"
       "- **fused**: whether graph-kernel fusion can chain it into one pass over memory "
       "(elementwise);\n"
       "- **in place**: the inputs its kernel writes (optimizer updates, running statistics);\n"
       "- **split across ranks**: what its shard rule accepts under SEMI_AUTO_PARALLEL and "
       "AUTO_PARALLEL, or why it runs whole on every rank.\n\n"
       "| op | in | out | attributes | gradient | AMP | fused | in place | split across ranks |\n"
       "|---|---|---|---|---|---|---|---|---|\n";
  for (size_t k = 0; k < ops::kNumOps; ++k) {
    const ops::OpDef& d = ops::op_def(ops::OpKind(k));
    std::string in_place;
    for (int i = 0; i < 32; ++i) {
      if (d.mutated_inputs & (1u << i))
        in_place += (in_place.empty() ? "" : ", ") + std::to_string(i);
    }
    s << "| `" << d.name << "` | " << count(d.num_inputs, d.optional_inputs) << " | "
      << count(d.num_outputs) << " | " << ops::attrs_kind_name(d.attrs) << " | "
      << cell(d.grad ? "yes" : std::string("no: ") + (d.no_grad_reason ? d.no_grad_reason : "?"))
      << " | " << amp_name(d.amp) << " | " << (d.tile ? "yes" : "") << " | " << in_place << " | "
      << cell(d.shard ? std::string(d.shard->accepts)
                      : std::string("whole: ") + (d.no_shard_reason ? d.no_shard_reason : "?"))
      << " |\n";
  }
  return s.str();
}

}  // namespace kiln::cli
