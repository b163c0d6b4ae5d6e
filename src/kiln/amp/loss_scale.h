#pragma once
// Loss scaling for fp16 (bf16 has fp32's exponent range and needs none by default).
// The loss is multiplied by scale() before backward; gradients are divided by it before the
// update. A step whose gradients overflowed (inf/NaN) is skipped entirely — weights and optimizer
// state untouched — and the dynamic manager halves its scale.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "kiln/amp/level.h"
#include "kiln/core/tensor.h"

namespace kiln::amp {

class LossScaleManager {
 public:
  virtual ~LossScaleManager() = default;
  virtual double scale() const = 0;
  // Reports whether this step's gradients overflowed; returns whether the update should be
  // applied.
  virtual bool update(bool overflow) = 0;
  int64_t skipped_steps() const { return skipped_; }

 protected:
  int64_t skipped_ = 0;
};

class FixedLossScaleManager : public LossScaleManager {
 public:
  explicit FixedLossScaleManager(double scale = 128.0, bool drop_overflow_update = true);
  double scale() const override { return scale_; }
  bool update(bool overflow) override;

 private:
  double scale_;
  bool drop_overflow_update_;
};

class DynamicLossScaleManager : public LossScaleManager {
 public:
  explicit DynamicLossScaleManager(double init_loss_scale = 16777216.0, double scale_factor = 2.0,
                                   int64_t scale_window = 2000);
  double scale() const override { return scale_; }
  bool update(bool overflow) override;

 private:
  double scale_;
  double factor_;
  int64_t window_;
  int64_t clean_steps_ = 0;
};

// "dynamic" (MindSpore's defaults: 2^24, factor 2, window 2000),
// "dynamic:INIT_LOSS_SCALE,SCALE_FACTOR,SCALE_WINDOW", "fixed:N" or "none"; null for none.
// MindSpore's default per level when `spec` is empty: dynamic for O2/O3 with fp16, none otherwise.
std::unique_ptr<LossScaleManager> make_loss_scale_manager(std::string_view spec,
                                                          const AmpConfig& config);

// True when any element of any tensor is inf or NaN.
bool has_overflow(const std::vector<Tensor>& grads);

}  // namespace kiln::amp
