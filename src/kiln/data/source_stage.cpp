// The source stage: samples a random-access source (shuffle, shards, num_samples) and reads it
// with several threads, or iterates an iterable source in one thread.
#include <algorithm>
#include <atomic>
#include <numeric>

#include "kiln/core/error.h"
#include "kiln/data/config.h"
#include "kiln/data/detail/pipeline.h"

namespace kiln::data::detail {
namespace {

void check_columns(const Source& src, const std::vector<Tensor>& columns, int64_t index,
                   size_t expected) {
  if (columns.size() != expected) {
    throw Error(kiln::detail::concat(src.name(), ": ", src.describe(index), " has ", columns.size(),
                                     " columns, but the source declares ", expected));
  }
}

// Row order of one epoch: a seeded permutation shared by every shard (same seed), then shard k
// takes positions k, k + num_shards, ... (wrapping around so every shard gets
// ceil(N / num_shards) rows), then num_samples caps it.
std::vector<int64_t> epoch_order(int64_t n, const SourceOptions& opt, bool shuffle, uint64_t seed,
                                 int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  if (shuffle && n > 1) {
    RowRng rng(mix_seed(seed, uint64_t(epoch), 0x5a3b1e));
    for (int64_t i = n - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[size_t(rng.randint(0, i))]);
  }
  std::vector<int64_t> order;
  if (opt.num_shards > 1 && n > 0) {
    int64_t s = opt.num_shards, per = (n + s - 1) / s;
    order.resize(size_t(per));
    for (int64_t j = 0; j < per; ++j) order[size_t(j)] = perm[size_t((opt.shard_id + j * s) % n)];
  } else {
    order = std::move(perm);
  }
  if (opt.num_samples > 0 && int64_t(order.size()) > opt.num_samples) {
    order.resize(size_t(opt.num_samples));
  }
  return order;
}

class RandomAccessSourceStage : public Stage {
 public:
  // `numbers_only`: the rows carry their source and row number, no columns (the batch after
  // this stage gathers them; Source::gathers_rows).
  RandomAccessSourceStage(const DatasetNode& node, int64_t epochs, int id, int workers, int rpb,
                          bool numbers_only)
      : Stage(node.source->name(), "source", workers, queue_capacity(0, rpb, workers), id),
        numbers_only_(numbers_only),
        src_(*node.source),
        opt_(node.source_options),
        shuffle_(node.source_options.shuffle.value_or(true)),
        num_rows_(node.source->num_rows()),
        num_columns_(node.columns.size()),
        epochs_(epochs),
        rows_per_block_(rpb) {}

  void start(Pipeline& p) override {
    for (int w = 0; w < workers; ++w) p.spawn(*this, [this, &p] { work(p); });
  }

  void skip_through_epoch(int64_t epoch) override {
    std::lock_guard<std::mutex> lock(mu_);
    skip_through_ = std::max(skip_through_, epoch);
  }

 private:
  struct Task {
    int64_t seq = 0, first_row = 0, begin = 0, end = 0;
    bool epoch_end = false;
    std::shared_ptr<const std::vector<int64_t>> order;
  };

  bool next_task(Pipeline& p, Task& t) {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return false;
    if (!order_) {
      if ((epochs_ >= 0 && epoch_ >= epochs_) || skip_through_ == kAllEpochs) {
        done_ = true;
        out.close(seq_);
        return false;
      }
      order_ = std::make_shared<const std::vector<int64_t>>(
          epoch_order(num_rows_, opt_, shuffle_, p.seed(), epoch_));
      pos_ = 0;
    }
    if (skip_through_ == kAllEpochs) {
      done_ = true;
      out.close(seq_);
      return false;
    }
    if (epoch_ <= skip_through_) pos_ = int64_t(order_->size());
    t = Task();
    t.seq = seq_++;
    t.first_row = next_row_;
    if (pos_ >= int64_t(order_->size())) {
      t.epoch_end = true;
      order_.reset();
      ++epoch_;
      return true;
    }
    t.begin = pos_;
    t.end = std::min<int64_t>(pos_ + rows_per_block_, int64_t(order_->size()));
    t.order = order_;
    pos_ = t.end;
    next_row_ += t.end - t.begin;
    return true;
  }

  void read_block(SourceReader& reader, const Task& t, Block& b) {
    std::vector<int64_t> indices(t.order->begin() + t.begin, t.order->begin() + t.end);
    for (size_t k = 0; k < indices.size(); ++k) {
      b.rows[k].source = &src_;
      b.rows[k].index = indices[k];
    }
    try {
      reader.read_many(indices, b.rows);
    } catch (const std::exception& e) {
      throw Error(kiln::detail::concat(name, ": failed to read ", indices.size(), " rows from ",
                                       src_.describe(indices.front()), ": ", e.what()));
    }
    for (size_t k = 0; k < indices.size(); ++k) {
      check_columns(src_, b.rows[k].columns, indices[k], num_columns_);
    }
  }

  void work_numbers_only(Pipeline& p) {
    WorkerClock clock(counters);
    Task t;
    while (!p.failed() && next_task(p, t)) {
      Block b;
      b.first_row = t.first_row;
      b.epoch_end = t.epoch_end;
      b.rows.resize(size_t(t.end - t.begin));
      for (int64_t i = t.begin; i < t.end; ++i) {
        Row& r = b.rows[size_t(i - t.begin)];
        r.source = &src_;
        r.index = (*t.order)[size_t(i)];
      }
      if (!push(clock, t.seq, std::move(b))) return;
    }
  }

  void work(Pipeline& p) {
    if (numbers_only_) {
      work_numbers_only(p);
      return;
    }
    std::unique_ptr<SourceReader> reader;
    try {
      reader = src_.make_reader();
    } catch (const std::exception& e) {
      throw Error(name + ": cannot open a reader: " + e.what());
    }
    WorkerClock clock(counters);
    // A reader that reads blocks at once learns each block one block ahead (will_read), so a
    // worker process behind it has two in flight: the one this thread takes and the next.
    const bool ahead = reader->reads_many();
    auto announce = [&](const Task& task) {
      if (ahead && task.end > task.begin) {
        reader->will_read(
            std::vector<int64_t>(task.order->begin() + task.begin, task.order->begin() + task.end));
      }
    };
    Task t, next;
    bool have = !p.failed() && next_task(p, t);
    if (have) announce(t);
    while (have) {
      bool have_next = false;
      if (ahead) {
        have_next = !p.failed() && next_task(p, next);
        if (have_next) announce(next);
      }
      Block b;
      b.first_row = t.first_row;
      b.epoch_end = t.epoch_end;
      b.rows.resize(size_t(t.end - t.begin));
      if (t.end > t.begin && ahead) {
        read_block(*reader, t, b);
      } else {
        for (int64_t i = t.begin; i < t.end; ++i) {
          int64_t index = (*t.order)[size_t(i)];
          Row& r = b.rows[size_t(i - t.begin)];
          r.source = &src_;
          r.index = index;
          try {
            reader->read(index, r.columns);
          } catch (const std::exception& e) {
            throw Error(name + ": failed to read " + src_.describe(index) + ": " + e.what());
          }
          check_columns(src_, r.columns, index, num_columns_);
        }
      }
      if (!push(clock, t.seq, std::move(b))) return;
      if (ahead) {
        t = std::move(next);
        have = have_next;
      } else {
        have = !p.failed() && next_task(p, t);
      }
    }
  }

  bool numbers_only_;
  const Source& src_;
  SourceOptions opt_;
  bool shuffle_;
  int64_t num_rows_;
  size_t num_columns_;
  int64_t epochs_;
  int rows_per_block_;
  std::mutex mu_;
  std::shared_ptr<const std::vector<int64_t>> order_;
  int64_t epoch_ = 0, pos_ = 0, seq_ = 0, next_row_ = 0;
  int64_t skip_through_ = -1;  // epochs up to this one end at once (skip_through_epoch)
  bool done_ = false;
};

class IterableSourceStage : public Stage {
 public:
  IterableSourceStage(const DatasetNode& node, int64_t epochs, int id, int rpb)
      : Stage(node.source->name(), "source", 1, queue_capacity(0, rpb, 1), id),
        src_(*node.source),
        limit_(node.source_options.num_samples),
        num_columns_(node.columns.size()),
        epochs_(epochs),
        rows_per_block_(rpb) {}

  void start(Pipeline& p) override {
    p.spawn(*this, [this, &p] { work(p); });
  }

  void skip_through_epoch(int64_t epoch) override {
    int64_t seen = skip_through_.load();
    while (seen < epoch && !skip_through_.compare_exchange_weak(seen, epoch)) {
    }
  }

 private:
  void work(Pipeline& p) {
    WorkerClock clock(counters);
    Emitter em(*this, clock, rows_per_block_);
    for (int64_t epoch = 0; epochs_ < 0 || epoch < epochs_; ++epoch) {
      if (skip_through_.load() == kAllEpochs) break;
      std::unique_ptr<SequentialReader> reader;
      try {
        reader = src_.make_sequential_reader();
      } catch (const std::exception& e) {
        throw Error(name + ": cannot start epoch " + std::to_string(epoch) + ": " + e.what());
      }
      for (int64_t i = 0; limit_ <= 0 || i < limit_; ++i) {
        if (p.failed()) return;
        if (skip_through_.load() >= epoch) break;
        Row r;
        r.source = &src_;
        r.index = i;
        bool more;
        try {
          more = reader->next(r.columns);
        } catch (const std::exception& e) {
          throw Error(name + ": failed to read " + src_.describe(i) + ": " + e.what());
        }
        if (!more) break;
        check_columns(src_, r.columns, i, num_columns_);
        if (!em.emit(std::move(r))) return;
      }
      if (!em.epoch_end()) return;
    }
    em.close();
  }

  const Source& src_;
  int64_t limit_;
  size_t num_columns_;
  int64_t epochs_;
  int rows_per_block_;
  std::atomic<int64_t> skip_through_{-1};  // epochs up to this one end at once
};

}  // namespace

std::unique_ptr<Stage> make_source_stage(const DatasetNode& node, int64_t epochs, int id,
                                         bool numbers_only) {
  int rpb = config::get_rows_per_block();
  if (!node.source->random_access()) {
    if (numbers_only) throw Error(node.source->name() + ": an iterable source has no row numbers");
    return std::make_unique<IterableSourceStage>(node, epochs, id, rpb);
  }
  // Numbering rows is no work to share out.
  int workers = numbers_only ? 1 : node.source_options.num_parallel_workers;
  if (workers <= 0) workers = node.source->default_workers();
  return std::make_unique<RandomAccessSourceStage>(node, epochs, id, std::max(1, workers), rpb,
                                                   numbers_only);
}

}  // namespace kiln::data::detail
