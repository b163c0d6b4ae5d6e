#include "kiln/data/detail/pipeline.h"

#include <algorithm>
#include <iostream>

#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/data/config.h"

namespace kiln::data::detail {

int queue_capacity(int prefetch_rows, int rows_per_block, int workers) {
  if (prefetch_rows <= 0) prefetch_rows = config::get_prefetch_size();
  int blocks = (prefetch_rows + rows_per_block - 1) / std::max(1, rows_per_block);
  // Parallel producers need room for every worker's block plus one being consumed.
  return std::max({4, blocks, 2 * workers});
}

bool Stage::push(WorkerClock& clock, int64_t seq, Block&& block) {
  int64_t rows = int64_t(block.rows.size());
  clock.stop_busy();
  bool ok = out.push(seq, std::move(block));
  clock.waited_out();
  counters.rows.fetch_add(rows, std::memory_order_relaxed);
  counters.blocks.fetch_add(1, std::memory_order_relaxed);
  return ok;
}

bool Stage::pop(WorkerClock& clock, BlockQueue& in, Block& block, int64_t* seq) {
  clock.stop_busy();
  bool ok = in.pop(block, seq);
  clock.waited_in();
  return ok;
}

bool Emitter::flush() {
  if (block_.rows.empty()) return true;
  Block b = std::move(block_);
  block_ = Block();
  block_.rows.reserve(size_t(rows_per_block_));
  return stage_.push(clock_, seq_++, std::move(b));
}

bool Emitter::epoch_end() {
  if (!flush()) return false;
  Block marker;
  marker.epoch_end = true;
  marker.first_row = next_row_;
  return stage_.push(clock_, seq_++, std::move(marker));
}

bool Emitter::emit_block(Block&& block) {
  if (!flush()) return false;
  if (block.epoch_end) return epoch_end();
  if (block.rows.empty()) return true;
  block.first_row = next_row_;
  next_row_ += int64_t(block.rows.size());
  return stage_.push(clock_, seq_++, std::move(block));
}

namespace {

// The source a batch node reads directly (through renames only) when the batch can gather its
// rows from it (Source::gathers_rows): nothing between them reads a row's columns, and the batch
// pads nothing and maps nothing per batch. Null otherwise.
const DatasetNode* gathered_source(const DatasetNode& batch) {
  if (batch.batch_options.per_batch_map || !batch.batch_options.pad_info.empty()) return nullptr;
  const DatasetNode* child = batch.children[0].get();
  while (child->kind == NodeKind::rename) child = child->children[0].get();
  if (child->kind != NodeKind::source || !child->source->random_access() ||
      !child->source->gathers_rows()) {
    return nullptr;
  }
  return child;
}

}  // namespace

Pipeline::Pipeline(std::shared_ptr<const DatasetNode> plan, int64_t num_epochs, uint64_t seed)
    : plan_(std::move(plan)), seed_(seed), start_ns_(now_ns()), num_epochs_(num_epochs) {
  root_ = build(*plan_, num_epochs);
  for (auto& s : stages_) s->start(*this);
}

Pipeline::~Pipeline() {
  stop();
}

Stage* Pipeline::build(const DatasetNode& node, int64_t epochs) {
  auto add = [&](std::unique_ptr<Stage> s, std::vector<Stage*> inputs) {
    s->inputs = std::move(inputs);
    stages_.push_back(std::move(s));
    return stages_.back().get();
  };
  auto next_id = [&] { return int(stages_.size()); };
  switch (node.kind) {
    case NodeKind::source:
      return add(make_source_stage(node, epochs, next_id()), {});
    case NodeKind::rename:  // names only: no stage
      return build(*node.children[0], epochs);
    case NodeKind::map: {
      Stage* child = build(*node.children[0], epochs);
      return add(make_map_stage(node, *child, next_id()), {child});
    }
    case NodeKind::batch: {
      const DatasetNode* gathered = gathered_source(node);
      Stage* child = gathered != nullptr
                         ? add(make_source_stage(*gathered, epochs, next_id(), true), {})
                         : build(*node.children[0], epochs);
      const bool gather = gathered != nullptr;
      if (node.batch_options.num_parallel_workers <= 1) {
        return add(make_batch_group_stage(node, *child, next_id(), /*collate=*/true, gather),
                   {child});
      }
      Stage* group =
          add(make_batch_group_stage(node, *child, next_id(), /*collate=*/false, gather), {child});
      return add(make_batch_stage(node, *group, next_id(), gather), {group});
    }
    case NodeKind::repeat: {
      int64_t child_epochs = (epochs < 0 || node.count < 0) ? -1 : epochs * node.count;
      Stage* child = build(*node.children[0], child_epochs);
      return add(make_sequential_stage(node, {child}, next_id(), epochs), {child});
    }
    default: {
      std::vector<Stage*> children;
      for (auto& c : node.children) children.push_back(build(*c, epochs));
      return add(make_sequential_stage(node, children, next_id(), epochs), children);
    }
  }
}

void Pipeline::spawn(Stage& stage, std::function<void()> body) {
  threads_.emplace_back([this, &stage, body = std::move(body)] {
    try {
      body();
    } catch (const std::exception& e) {
      fail(e.what());
    } catch (...) {
      fail(stage.name + ": unknown exception");
    }
  });
}

void Pipeline::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (failed_.load()) return;
    error_ = message;
    failed_.store(true, std::memory_order_release);
  }
  for (auto& s : stages_) s->out.abort();
}

void Pipeline::stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& s : stages_) s->out.abort();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void Pipeline::throw_error() {
  stop();
  std::string message;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    message = error_;
  }
  throw Error(message);
}

bool Pipeline::next(Row& row) {
  if (failed()) throw_error();
  for (;;) {
    if (pos_ < block_.rows.size()) {
      row = std::move(block_.rows[pos_++]);
      rows_consumed_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (finished_ || stopped_) return false;
    if (num_epochs_ >= 0 && epochs_done_ >= num_epochs_) {
      finished_ = true;
      return false;
    }
    block_.rows.clear();
    pos_ = 0;
    int64_t t0 = now_ns();
    bool ok = root_->out.pop(block_, nullptr, on_wait);
    consumer_wait_ns_.fetch_add(now_ns() - t0, std::memory_order_relaxed);
    if (!ok) {
      if (failed()) throw_error();
      finished_ = true;
      return false;
    }
    if (block_.epoch_end) {
      epochs_done_.fetch_add(1, std::memory_order_relaxed);
      block_.rows.clear();
      if (print_summary) std::cerr << stats().summary() << std::flush;
      return false;
    }
  }
}

PipelineStats Pipeline::stats() const {
  PipelineStats s;
  s.wall_s = double(now_ns() - start_ns_) * 1e-9;
  s.rows_consumed = rows_consumed_.load(std::memory_order_relaxed);
  s.consumer_wait_s = double(consumer_wait_ns_.load(std::memory_order_relaxed)) * 1e-9;
  for (auto& st : stages_) {
    StageStats x;
    x.name = st->name;
    x.kind = st->kind;
    x.workers = st->workers;
    x.rows = st->counters.rows.load(std::memory_order_relaxed);
    x.blocks = st->counters.blocks.load(std::memory_order_relaxed);
    x.busy_s = double(st->counters.busy_ns.load(std::memory_order_relaxed)) * 1e-9;
    x.wait_in_s = double(st->counters.wait_in_ns.load(std::memory_order_relaxed)) * 1e-9;
    x.wait_out_s = double(st->counters.wait_out_ns.load(std::memory_order_relaxed)) * 1e-9;
    x.queue_capacity = st->out.capacity();
    x.queue_blocks = int(st->out.size());
    s.stages.push_back(std::move(x));
  }
  diagnose(s, available_cores());
  return s;
}

}  // namespace kiln::data::detail
