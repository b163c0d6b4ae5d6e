#pragma once
// Settles a choice between ways of running the same training step (thread strategies:
// compiled_step.h) on training's own steps. A measurement at compile time repeats one batch with
// nothing else running; training has its data pipeline beside it, and there the ways can rank
// otherwise (graph LeNet's batch split is 5% faster in training and looked tied at compile time).
// So the candidates the compile-time measurement could not tell apart take turns at real steps:
// blocks of consecutive steps, in rotating order, for a bounded number of rounds. A step's cost is
// the time from its start to the next step's start, which counts the wait for its batch as well.
// The first step of each block is not counted (it follows a switch: other caches, other threads).
//
//   StepTrial trial({1.0, 1.03}, 0.002);        // two candidates, the second 3% handicapped
//   while (training) {
//     const int k = trial.next(steady_clock::now());  // run this step with candidate k
//     if (trial.decided()) ... keep trial.winner() ...
//   }
//
// After 4 rounds, a candidate that beats every other by 10% wins at once; close ones run all the
// rounds.
//
// Pure bookkeeping, no clock of its own: tests drive it with made-up times.
#include <chrono>
#include <cstdint>
#include <vector>

namespace kiln::train {

// The median of `values` (the upper of the two middle ones for an even count); 0 for none.
double median(std::vector<double> values);

class StepTrial {
 public:
  using Clock = std::chrono::steady_clock;

  // `handicaps[k]` multiplies candidate k's median step time when they are compared (1.03: it
  // must win by 3%); `step_seconds` is what a step was measured to take, which sizes the blocks
  // and the number of rounds. At least two candidates.
  StepTrial(std::vector<double> handicaps, double step_seconds);

  // The candidate the step starting at `now` runs with. Records the time since the previous
  // call as the previous step's cost. Once decided, always the winner.
  int next(Clock::time_point now);
  bool decided() const { return decided_; }
  // Whether a clear lead ended the trial before its last round.
  bool decided_early() const { return decided_early_; }
  int winner() const { return winner_; }
  int candidates() const { return int(handicaps_.size()); }
  // Median cost of each candidate's counted steps so far, in ms (0 before any); and how many
  // steps were counted in all.
  std::vector<double> median_ms() const;
  int64_t counted_steps() const;
  int steps_per_block() const { return block_steps_; }
  int rounds() const { return rounds_; }

 private:
  // The candidate with the lowest handicapped median.
  int leader(const std::vector<double>& medians) const;
  void decide();
  void decide_if_clear();

  std::vector<double> handicaps_;
  std::vector<std::vector<double>> seconds_;  // per candidate, its counted steps
  int block_steps_ = 0;
  int rounds_ = 0;
  int64_t steps_started_ = 0;  // steps handed out so far
  int previous_ = -1;          // candidate of the step that started at previous_start_
  bool previous_counted_ = false;
  Clock::time_point previous_start_{};
  bool decided_ = false;
  bool decided_early_ = false;
  int winner_ = 0;
};

}  // namespace kiln::train
