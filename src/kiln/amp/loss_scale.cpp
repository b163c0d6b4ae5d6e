#include "kiln/amp/loss_scale.h"

#include <cmath>
#include <string>

#include "kiln/core/error.h"

namespace kiln::amp {

FixedLossScaleManager::FixedLossScaleManager(double scale, bool drop_overflow_update)
    : scale_(scale), drop_overflow_update_(drop_overflow_update) {
  if (!(scale >= 1.0) || !std::isfinite(scale)) {
    throw Error("FixedLossScaleManager: loss_scale must be a finite number >= 1, got " +
                std::to_string(scale));
  }
}

bool FixedLossScaleManager::update(bool overflow) {
  if (overflow && drop_overflow_update_) {
    ++skipped_;
    return false;
  }
  return true;
}

DynamicLossScaleManager::DynamicLossScaleManager(double init_loss_scale, double scale_factor,
                                                 int64_t scale_window)
    : scale_(init_loss_scale), factor_(scale_factor), window_(scale_window) {
  if (!(init_loss_scale >= 1.0))
    throw Error("DynamicLossScaleManager: init_loss_scale must be >= 1");
  if (!(scale_factor > 1.0)) throw Error("DynamicLossScaleManager: scale_factor must be > 1");
  if (scale_window < 1) throw Error("DynamicLossScaleManager: scale_window must be >= 1");
}

bool DynamicLossScaleManager::update(bool overflow) {
  if (overflow) {
    scale_ = std::max(1.0, scale_ / factor_);
    clean_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_steps_ >= window_) {
    scale_ *= factor_;
    clean_steps_ = 0;
  }
  return true;
}

namespace {

// The comma-separated numbers of `text`; an Error naming `spec` and its form otherwise.
std::vector<double> parse_numbers(std::string_view text, std::string_view spec,
                                  std::string_view form) {
  std::vector<double> numbers;
  size_t begin = 0;
  while (true) {
    size_t comma = text.find(',', begin);
    std::string value(text.substr(begin, comma == std::string_view::npos ? comma : comma - begin));
    char* end = nullptr;
    double number = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0') {
      throw Error("loss_scale: '" + std::string(spec) + "' is not " + std::string(form));
    }
    numbers.push_back(number);
    if (comma == std::string_view::npos) return numbers;
    begin = comma + 1;
  }
}

}  // namespace

std::unique_ptr<LossScaleManager> make_loss_scale_manager(std::string_view spec,
                                                          const AmpConfig& config) {
  if (spec.empty()) {
    bool fp16 = config.low_dtype == DType::f16 &&
                (config.level == AmpLevel::O2 || config.level == AmpLevel::O3);
    return fp16 ? std::make_unique<DynamicLossScaleManager>() : nullptr;
  }
  if (spec == "none") return nullptr;
  if (spec == "dynamic") return std::make_unique<DynamicLossScaleManager>();
  if (spec.substr(0, 8) == "dynamic:") {
    constexpr std::string_view form = "dynamic:<init_loss_scale>,<scale_factor>,<scale_window>";
    std::vector<double> n = parse_numbers(spec.substr(8), spec, form);
    if (n.size() != 3 || n[2] != std::floor(n[2])) {
      throw Error("loss_scale: '" + std::string(spec) + "' is not " + std::string(form) +
                  " (scale_window a whole number)");
    }
    return std::make_unique<DynamicLossScaleManager>(n[0], n[1], int64_t(n[2]));
  }
  if (spec.substr(0, 6) == "fixed:") {
    std::vector<double> n = parse_numbers(spec.substr(6), spec, "fixed:<number>");
    if (n.size() != 1) throw Error("loss_scale: '" + std::string(spec) + "' is not fixed:<number>");
    return std::make_unique<FixedLossScaleManager>(n[0]);
  }
  throw Error("loss_scale: unknown setting '" + std::string(spec) +
              "' (expected dynamic, dynamic:INIT,FACTOR,WINDOW, fixed:N or none)");
}

bool has_overflow(const std::vector<Tensor>& grads) {
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    Tensor c = g.dtype() == DType::f32 ? g.contiguous() : Tensor();
    if (!c.defined()) {
      c = Tensor::empty(g.shape(), DType::f32);
      c.copy_from(g);
    }
    const float* p = c.data<float>();
    const int64_t n = c.numel();
    bool bad = false;
#pragma omp parallel for reduction(|| : bad) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) bad = bad || !std::isfinite(p[i]);
    if (bad) return true;
  }
  return false;
}

}  // namespace kiln::amp
