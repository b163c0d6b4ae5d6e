#pragma once
// The running pipeline (internal): stages, their threads and queues.
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data/detail/block_queue.h"
#include "kiln/data/detail/node.h"
#include "kiln/data/stats.h"

namespace kiln::data::detail {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct StageCounters {
  std::atomic<int64_t> rows{0}, blocks{0}, busy_ns{0}, wait_in_ns{0}, wait_out_ns{0};
};

// Splits one worker thread's time into busy / waiting on input / waiting on output.
class WorkerClock {
 public:
  explicit WorkerClock(StageCounters& c) : c_(c), mark_(now_ns()) {}
  ~WorkerClock() { stop_busy(); }
  void stop_busy() { c_.busy_ns.fetch_add(lap(), std::memory_order_relaxed); }
  void waited_in() { c_.wait_in_ns.fetch_add(lap(), std::memory_order_relaxed); }
  void waited_out() { c_.wait_out_ns.fetch_add(lap(), std::memory_order_relaxed); }

 private:
  int64_t lap() {
    int64_t t = now_ns(), d = t - mark_;
    mark_ = t;
    return d;
  }
  StageCounters& c_;
  int64_t mark_;
};

class Pipeline;

// skip_through_epoch(kAllEpochs): read nothing more, end the stream.
inline constexpr int64_t kAllEpochs = std::numeric_limits<int64_t>::max();

class Stage {
 public:
  Stage(std::string name, std::string kind, int workers, int capacity_blocks, int id)
      : name(std::move(name)),
        kind(std::move(kind)),
        workers(workers),
        id(id),
        out(capacity_blocks) {}
  virtual ~Stage() = default;
  virtual void start(Pipeline& p) = 0;

  // Skips what is left of this stage's output epochs up to and including `epoch` (counted from
  // 0): a take that has its rows asks this of its input, so the sources stop reading rows that
  // would only be dropped. Rows already read or queued still arrive. Called from another
  // stage's thread. Sources act on it; repeat translates its epochs; the others pass it on.
  virtual void skip_through_epoch(int64_t epoch) {
    for (Stage* in : inputs) in->skip_through_epoch(epoch);
  }

  // Pushes one block (timing the wait); false when aborted.
  bool push(WorkerClock& clock, int64_t seq, Block&& block);
  // Pops one block from `in` (timing the wait); false at the end or on abort.
  bool pop(WorkerClock& clock, BlockQueue& in, Block& block, int64_t* seq = nullptr);

  std::string name, kind;
  int workers;
  int id;                      // position in the pipeline; seeds the stage's random draws
  std::vector<Stage*> inputs;  // the stages this one pops from (set by Pipeline::build)
  BlockQueue out;
  StageCounters counters;
};

// Collects the rows a sequential stage emits into blocks and numbers them.
class Emitter {
 public:
  Emitter(Stage& stage, WorkerClock& clock, int rows_per_block)
      : stage_(stage), clock_(clock), rows_per_block_(rows_per_block) {}
  bool emit(Row&& row) {
    if (block_.rows.empty()) block_.first_row = next_row_;
    block_.rows.push_back(std::move(row));
    ++next_row_;
    return int(block_.rows.size()) < rows_per_block_ || flush();
  }
  bool flush();
  bool epoch_end();  // flush, then an end-of-epoch marker
  // Hands on a whole block (renumbering its rows); flushes pending rows first.
  bool emit_block(Block&& block);
  void close() { stage_.out.close(seq_); }

 private:
  Stage& stage_;
  WorkerClock& clock_;
  int rows_per_block_;
  Block block_;
  int64_t seq_ = 0, next_row_ = 0;
};

class Pipeline {
 public:
  Pipeline(std::shared_ptr<const DatasetNode> plan, int64_t num_epochs, uint64_t seed);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Next row of the current epoch; false at the epoch's end or the data's end. Throws the
  // pipeline's error.
  bool next(Row& row);
  void stop();
  PipelineStats stats() const;
  int64_t epochs_done() const { return epochs_done_.load(std::memory_order_relaxed); }
  bool print_summary = false;
  std::function<void()> on_wait;  // IteratorOptions::on_wait

  // For stages.
  void spawn(Stage& stage, std::function<void()> body);
  void fail(const std::string& message);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  uint64_t seed() const { return seed_; }

 private:
  Stage* build(const DatasetNode& node, int64_t epochs);
  void throw_error();

  std::shared_ptr<const DatasetNode> plan_;  // the stages refer to its nodes
  uint64_t seed_;
  std::vector<std::unique_ptr<Stage>> stages_;  // children before parents
  Stage* root_ = nullptr;
  std::vector<std::thread> threads_;
  std::mutex error_mu_;
  std::string error_;
  std::atomic<bool> failed_{false};
  bool stopped_ = false;
  int64_t start_ns_;
  // Consumer side.
  Block block_;
  size_t pos_ = 0;
  bool finished_ = false;
  // Written by the consumer, read by stats() from any thread (a profiler, say).
  std::atomic<int64_t> epochs_done_{0}, rows_consumed_{0}, consumer_wait_ns_{0};
  int64_t num_epochs_;
};

// Stage factories (stages.cpp, source_stage.cpp).
// `numbers_only`: the source's rows carry only their row numbers, for a batch that gathers them
// (`gather` below; Source::gathers_rows).
std::unique_ptr<Stage> make_source_stage(const DatasetNode& node, int64_t epochs, int id,
                                         bool numbers_only = false);
std::unique_ptr<Stage> make_map_stage(const DatasetNode& node, Stage& child, int id);
std::unique_ptr<Stage> make_batch_group_stage(const DatasetNode& node, Stage& child, int id,
                                              bool collate, bool gather);
std::unique_ptr<Stage> make_batch_stage(const DatasetNode& node, Stage& child, int id, bool gather);
// `epochs`: the epochs the stage's output will be read for (-1: no end); take stops its input
// after the last one.
std::unique_ptr<Stage> make_sequential_stage(const DatasetNode& node, std::vector<Stage*> children,
                                             int id, int64_t epochs);

// Queue capacity, in blocks, for a stage with `workers` producers.
int queue_capacity(int prefetch_rows, int rows_per_block, int workers);

}  // namespace kiln::data::detail
