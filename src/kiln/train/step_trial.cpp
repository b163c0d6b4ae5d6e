#include "kiln/train/step_trial.h"

#include <algorithm>
#include <cmath>

#include "kiln/core/error.h"

namespace kiln::train {
namespace {

// A block lasts about this long: long enough that the switch step it drops is a small share,
// short enough that rounds alternate faster than a shared machine's speed drifts (over seconds).
constexpr double kBlockSeconds = 0.03;
// The whole trial aims at about this long, within 4 to 12 rounds.
constexpr double kTrialSeconds = 1.0;
// From this many rounds on, a candidate that beats every other by kClearMargin (handicaps
// included) wins without the remaining rounds: each round of a clearly slower candidate is a
// loss the trial adds to training (graph LeNet's per-kernel steps run 10-15% behind its batch
// split, and 12 rounds of them cost about 3% of a 1,500-step run).
constexpr int kMinRounds = 4;
constexpr double kClearMargin = 1.10;

}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const auto middle = values.begin() + std::ptrdiff_t(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

StepTrial::StepTrial(std::vector<double> handicaps, double step_seconds)
    : handicaps_(std::move(handicaps)), seconds_(handicaps_.size()) {
  if (handicaps_.size() < 2) throw Error("StepTrial: needs at least two candidates");
  if (!(step_seconds > 0) || !std::isfinite(step_seconds)) step_seconds = 1e-3;
  block_steps_ = std::clamp(int(std::lround(kBlockSeconds / step_seconds)), 3, 16);
  const double round_seconds = double(block_steps_) * double(candidates()) * step_seconds;
  rounds_ = std::clamp(int(kTrialSeconds / round_seconds), 4, 12);
}

int StepTrial::next(Clock::time_point now) {
  if (previous_ >= 0 && previous_counted_) {
    seconds_[size_t(previous_)].push_back(
        std::chrono::duration<double>(now - previous_start_).count());
  }
  const int64_t per_round = int64_t(block_steps_) * candidates();
  if (!decided_ && steps_started_ >= per_round * rounds_) decide();
  if (!decided_ && steps_started_ % per_round == 0 && steps_started_ >= per_round * kMinRounds) {
    decide_if_clear();
  }
  if (decided_) {
    previous_ = -1;
    return winner_;
  }
  const int64_t round = steps_started_ / per_round;
  const int64_t position = (steps_started_ / block_steps_) % candidates();
  const int candidate = int((position + round) % candidates());
  previous_counted_ = steps_started_ % block_steps_ != 0;
  previous_ = candidate;
  previous_start_ = now;
  ++steps_started_;
  return candidate;
}

int StepTrial::leader(const std::vector<double>& medians) const {
  int best = 0;
  for (int k = 1; k < candidates(); ++k) {
    if (medians[size_t(k)] * handicaps_[size_t(k)] <
        medians[size_t(best)] * handicaps_[size_t(best)]) {
      best = k;
    }
  }
  return best;
}

void StepTrial::decide() {
  winner_ = leader(median_ms());
  decided_ = true;
}

void StepTrial::decide_if_clear() {
  const std::vector<double> medians = median_ms();
  const int best = leader(medians);
  const double best_ms = medians[size_t(best)] * handicaps_[size_t(best)];
  for (int k = 0; k < candidates(); ++k) {
    if (k != best && medians[size_t(k)] * handicaps_[size_t(k)] < kClearMargin * best_ms) return;
  }
  winner_ = best;
  decided_ = true;
  decided_early_ = true;
}

std::vector<double> StepTrial::median_ms() const {
  std::vector<double> out;
  for (const std::vector<double>& s : seconds_) out.push_back(median(s) * 1e3);
  return out;
}

int64_t StepTrial::counted_steps() const {
  int64_t n = 0;
  for (const std::vector<double>& s : seconds_) n += int64_t(s.size());
  return n;
}

}  // namespace kiln::train
