// The one-thread stages: shuffle, repeat, skip, take, project, zip, concat.
#include <algorithm>
#include <mutex>

#include "kiln/core/error.h"
#include "kiln/data/config.h"
#include "kiln/data/detail/pipeline.h"

namespace kiln::data::detail {
namespace {

class SequentialStage : public Stage {
 public:
  SequentialStage(const DatasetNode& node, std::vector<Stage*> children, int id, const char* kind,
                  int64_t epochs)
      : Stage(node.stage_name(), kind, 1, queue_capacity(0, config::get_rows_per_block(), 1), id),
        node_(node),
        children_(std::move(children)),
        rows_per_block_(config::get_rows_per_block()),
        epochs_(epochs) {}

  void start(Pipeline& p) override {
    p.spawn(*this, [this, &p] {
      WorkerClock clock(counters);
      Emitter em(*this, clock, rows_per_block_);
      if (run(p, clock, em)) {
        for (Stage* c : children_) {
          if (c->out.aborted()) return;
        }
        em.close();
      }
    });
  }

 protected:
  // Returns true when the input ended normally (the output is then closed).
  virtual bool run(Pipeline& p, WorkerClock& clock, Emitter& em) = 0;
  bool pop_child(WorkerClock& clock, size_t i, Block& b) {
    return pop(clock, children_[i]->out, b);
  }

  const DatasetNode& node_;
  std::vector<Stage*> children_;
  int rows_per_block_;
  int64_t epochs_;  // output epochs that will be read; -1: no end
};

class ShuffleStage : public SequentialStage {
 public:
  using SequentialStage::SequentialStage;

 protected:
  bool run(Pipeline& p, WorkerClock& clock, Emitter& em) override {
    RowRng rng(mix_seed(p.seed(), uint64_t(id), 0x5b0ff1e));
    const size_t cap = size_t(node_.count);
    std::vector<Row> buffer;
    buffer.reserve(std::min<size_t>(cap, size_t(1) << 16));
    Block b;
    while (pop_child(clock, 0, b)) {
      if (b.epoch_end) {
        while (!buffer.empty()) {
          size_t j = size_t(rng.randint(0, int64_t(buffer.size()) - 1));
          Row r = std::move(buffer[j]);
          buffer[j] = std::move(buffer.back());
          buffer.pop_back();
          if (!em.emit(std::move(r))) return false;
        }
        if (!em.epoch_end()) return false;
        continue;
      }
      for (Row& r : b.rows) {
        if (buffer.size() < cap) {
          buffer.push_back(std::move(r));
          continue;
        }
        size_t j = size_t(rng.randint(0, int64_t(cap) - 1));
        Row out = std::move(buffer[j]);
        buffer[j] = std::move(r);
        if (!em.emit(std::move(out))) return false;
      }
    }
    return true;
  }
};

class RepeatStage : public SequentialStage {
 public:
  using SequentialStage::SequentialStage;

  // Output epoch e is input epochs [e * count, (e + 1) * count). Repeating forever has one
  // endless output epoch: skipping it ends it at the end of the input epoch now being read.
  void skip_through_epoch(int64_t epoch) override {
    const int64_t count = node_.count;
    if (epoch == kAllEpochs) {
      SequentialStage::skip_through_epoch(kAllEpochs);
    } else if (count > 0) {
      SequentialStage::skip_through_epoch(
          epoch >= kAllEpochs / count - 1 ? kAllEpochs : (epoch + 1) * count - 1);
    } else {
      int64_t input_epoch;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (epoch < output_epochs_) return;
        end_output_epoch_ = true;
        input_epoch = input_epochs_;
      }
      SequentialStage::skip_through_epoch(input_epoch);
    }
  }

 protected:
  bool run(Pipeline&, WorkerClock& clock, Emitter& em) override {
    Block b;
    int64_t rows_this_pass = 0;
    while (pop_child(clock, 0, b)) {
      if (b.epoch_end) {
        bool end_output;
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++input_epochs_;
          end_output = (node_.count > 0 && input_epochs_ % node_.count == 0) || end_output_epoch_;
          if (end_output_epoch_) ++output_epochs_;
          end_output_epoch_ = false;
        }
        if (rows_this_pass == 0 && node_.count < 0 && !end_output) {
          throw Error(name + ": the input yielded no rows, so repeating it forever would never " +
                      "yield one");
        }
        rows_this_pass = 0;
        if (end_output && !em.epoch_end()) return false;
        continue;
      }
      rows_this_pass += int64_t(b.rows.size());
      if (!em.emit_block(std::move(b))) return false;
      b = Block();
    }
    return true;
  }

 private:
  std::mutex mu_;  // the counts below, shared with skip_through_epoch()
  int64_t input_epochs_ = 0, output_epochs_ = 0;
  bool end_output_epoch_ = false;
};

// skip counts rows per epoch.
class SkipStage : public SequentialStage {
 public:
  using SequentialStage::SequentialStage;

 protected:
  bool run(Pipeline&, WorkerClock& clock, Emitter& em) override {
    Block b;
    int64_t seen = 0;
    while (pop_child(clock, 0, b)) {
      if (b.epoch_end) {
        seen = 0;
        if (!em.epoch_end()) return false;
        continue;
      }
      for (Row& r : b.rows) {
        if (seen++ >= node_.count && !em.emit(std::move(r))) return false;
      }
    }
    return true;
  }
};

// take counts rows per epoch. Once an epoch has its rows it ends that epoch and has its input
// skip the rest (after the last epoch: stop), so a source of 60,000 rows under take(3) reads 3
// rows plus what the queues hold, not 60,000; rows already in flight are dropped here.
class TakeStage : public SequentialStage {
 public:
  using SequentialStage::SequentialStage;

 protected:
  bool run(Pipeline&, WorkerClock& clock, Emitter& em) override {
    const int64_t want = node_.count;  // -1: all
    Block b;
    int64_t epoch = 0, taken = 0;
    bool dropping = false;  // the epoch has its rows; the rest of the input's epoch is dropped
    while (pop_child(clock, 0, b)) {
      if (b.epoch_end) {
        if (!dropping && !em.epoch_end()) return false;
        dropping = false;
        taken = 0;
        ++epoch;
        continue;
      }
      if (dropping) continue;
      for (Row& r : b.rows) {
        if (taken == want) break;
        if (!em.emit(std::move(r))) return false;
        ++taken;
      }
      if (taken != want) continue;
      if (!em.epoch_end()) return false;
      if (epochs_ >= 0 && epoch + 1 >= epochs_) {
        // The last epoch: the input stops, and what it still sends is drained so its threads
        // end on their own.
        skip_through_epoch(kAllEpochs);
        while (pop_child(clock, 0, b)) {
        }
        return true;
      }
      skip_through_epoch(epoch);
      dropping = true;
    }
    return true;
  }
};

class ProjectStage : public SequentialStage {
 public:
  using SequentialStage::SequentialStage;

 protected:
  bool run(Pipeline&, WorkerClock& clock, Emitter& em) override {
    Block b;
    while (pop_child(clock, 0, b)) {
      for (Row& r : b.rows) {
        std::vector<Tensor> cols;
        cols.reserve(node_.project_index.size());
        for (int k : node_.project_index) cols.push_back(r.columns[size_t(k)]);
        r.columns = std::move(cols);
      }
      if (!em.emit_block(std::move(b))) return false;
      b = Block();
    }
    return true;
  }
};

// Rows side by side; an epoch ends with the shortest child (the others' rest is dropped).
class ZipStage : public SequentialStage {
 public:
  using SequentialStage::SequentialStage;

 protected:
  bool run(Pipeline&, WorkerClock& clock, Emitter& em) override {
    const size_t n = children_.size();
    std::vector<Block> blocks(n);
    std::vector<size_t> pos(n, 0);
    std::vector<bool> at_end(n, false);
    for (;;) {
      // One row from each child, or note that the child's epoch ended.
      bool any_end = false;
      for (size_t c = 0; c < n; ++c) {
        while (!at_end[c] && pos[c] >= blocks[c].rows.size()) {
          blocks[c] = Block();
          pos[c] = 0;
          if (!pop_child(clock, c, blocks[c])) return true;
          if (blocks[c].epoch_end) at_end[c] = true;
        }
        any_end = any_end || at_end[c];
      }
      if (any_end) {
        for (size_t c = 0; c < n; ++c) {
          while (!at_end[c]) {
            blocks[c] = Block();
            pos[c] = 0;
            if (!pop_child(clock, c, blocks[c])) return true;
            at_end[c] = blocks[c].epoch_end;
          }
          at_end[c] = false;
          blocks[c] = Block();
          pos[c] = 0;
        }
        if (!em.epoch_end()) return false;
        continue;
      }
      Row out;
      for (size_t c = 0; c < n; ++c) {
        Row& r = blocks[c].rows[pos[c]++];
        if (c == 0) {
          out.source = r.source;
          out.index = r.index;
        }
        for (Tensor& t : r.columns) out.columns.push_back(std::move(t));
      }
      if (!em.emit(std::move(out))) return false;
    }
  }
};

class ConcatStage : public SequentialStage {
 public:
  using SequentialStage::SequentialStage;

 protected:
  bool run(Pipeline&, WorkerClock& clock, Emitter& em) override {
    Block b;
    for (;;) {
      for (size_t c = 0; c < children_.size(); ++c) {
        for (;;) {
          b = Block();
          if (!pop_child(clock, c, b)) return true;
          if (b.epoch_end) break;
          if (!em.emit_block(std::move(b))) return false;
        }
      }
      if (!em.epoch_end()) return false;
    }
  }
};

}  // namespace

std::unique_ptr<Stage> make_sequential_stage(const DatasetNode& node, std::vector<Stage*> children,
                                             int id, int64_t epochs) {
  switch (node.kind) {
    case NodeKind::shuffle:
      return std::make_unique<ShuffleStage>(node, std::move(children), id, "shuffle", epochs);
    case NodeKind::repeat:
      return std::make_unique<RepeatStage>(node, std::move(children), id, "repeat", epochs);
    case NodeKind::skip:
      return std::make_unique<SkipStage>(node, std::move(children), id, "skip", epochs);
    case NodeKind::take:
      return std::make_unique<TakeStage>(node, std::move(children), id, "take", epochs);
    case NodeKind::project:
      return std::make_unique<ProjectStage>(node, std::move(children), id, "project", epochs);
    case NodeKind::zip:
      return std::make_unique<ZipStage>(node, std::move(children), id, "zip", epochs);
    case NodeKind::concat:
      return std::make_unique<ConcatStage>(node, std::move(children), id, "concat", epochs);
    default:
      throw Error("internal: no sequential stage for " + node.stage_name());
  }
}

}  // namespace kiln::data::detail
