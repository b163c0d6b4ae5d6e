#pragma once
// Mixed-precision levels with MindSpore's meaning:
//   O0  everything in fp32;
//   O1  the white list (ops whose AmpClass is low_precision: matmul, conv) in low precision,
//       everything else fp32;
//   O2  the whole network in low precision except the black list (ops whose AmpClass is fp32:
//       softmax, the loss, and BatchNorm/LayerNorm when keep_batchnorm_fp32); fp32 master
//       weights stay in the optimizer;
//   O3  everything in low precision.
// With bf16 at O1 and O2, unless `strict`, an op goes to bf16 only where that pays on this CPU,
// its casts included (amp/placement.h); `strict` keeps MindSpore's placement exactly.
#include <memory>
#include <string_view>

#include "kiln/core/dtype.h"

namespace kiln::amp {

enum class AmpLevel { O0, O1, O2, O3 };

class CostModel;  // amp/placement.h

struct AmpConfig {
  AmpLevel level = AmpLevel::O0;
  DType low_dtype = DType::bf16;  // bf16 on CPU by default; f16 on request
  bool keep_batchnorm_fp32 = true;
  // MindSpore's placement, op for op, whether or not low precision pays on this CPU.
  bool strict = false;
  // What ops cost, for the placement when not strict; null: the process's measured model.
  std::shared_ptr<CostModel> cost_model;
};

// "O0".."O3"; throws Error naming the bad value.
AmpLevel parse_level(std::string_view name);
std::string_view level_name(AmpLevel level);
// "bf16" or "fp16"/"f16"; throws Error naming the bad value.
DType parse_low_dtype(std::string_view name);

}  // namespace kiln::amp
