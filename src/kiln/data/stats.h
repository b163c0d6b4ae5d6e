#pragma once
// Per-stage pipeline statistics and the bottleneck summary (the profiler consumes these).
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::data {

struct StageStats {
  std::string name;        // "map[Decode,RandomCrop]"
  std::string kind;        // "source", "map", "batch", "shuffle", ...
  int workers = 1;         // threads of the stage
  int64_t rows = 0;        // rows the stage handed on (batches for a batch stage)
  int64_t blocks = 0;      // hand-offs to the next queue (rows move in blocks)
  double busy_s = 0;       // summed over workers: time doing the stage's work
  double wait_in_s = 0;    // summed over workers: time blocked on the input queue
  double wait_out_s = 0;   // summed over workers: time blocked on a full output queue
  int queue_capacity = 0;  // output queue capacity, in blocks
  int queue_blocks = 0;    // blocks waiting in the output queue when the statistics were taken
  // Fraction of the stage's thread-time spent working, over `wall_s` of the pipeline.
  double busy_fraction(double wall_s) const;
};

struct PipelineStats {
  double wall_s = 0;               // since the iterator started
  int64_t rows_consumed = 0;       // rows (batches after batch) the consumer took
  double consumer_wait_s = 0;      // time the consumer waited for the pipeline
  std::vector<StageStats> stages;  // source first, the stage next to the consumer last
  std::string bottleneck;          // name of the slowest stage, or "consumer"
  std::string advice;              // what to change

  // A one-screen table with the bottleneck and the advice.
  std::string summary() const;
  // One JSON object: {"wall_s":..,"rows_consumed":..,"stages":[{..}],"bottleneck":..,"advice":..}.
  std::string to_json() const;
};

// Fills bottleneck and advice from the numbers (exposed for tests).
void diagnose(PipelineStats& stats, int available_cores);

}  // namespace kiln::data
