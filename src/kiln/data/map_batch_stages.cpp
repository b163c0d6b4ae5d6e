// The parallel stages: map (N workers, order kept by sequence number) and batch (grouping, then N
// workers copying rows into one preallocated tensor per column).
#include <algorithm>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/data/config.h"
#include "kiln/data/detail/pipeline.h"

namespace kiln::data::detail {
namespace {

// Runs `process(block, seq)` on blocks of `child` with `workers` threads; output keeps the input's
// sequence numbers, so the order does not depend on which worker finishes first.
class ParallelStage : public Stage {
 public:
  ParallelStage(std::string name, std::string kind, int workers, int capacity, int id, Stage& child)
      : Stage(std::move(name), std::move(kind), workers, capacity, id), child_(child) {}

  void start(Pipeline& p) override {
    for (int w = 0; w < workers; ++w) p.spawn(*this, [this, &p] { work(p); });
  }

 protected:
  virtual void process(Pipeline& p, Block& block) = 0;

 private:
  void work(Pipeline& p) {
    WorkerClock clock(counters);
    Block b;
    int64_t seq;
    while (pop(clock, child_.out, b, &seq)) {
      if (!b.epoch_end) process(p, b);
      if (!push(clock, seq, std::move(b))) return;
    }
    if (!child_.out.aborted()) out.close(child_.out.end_seq());
  }

  Stage& child_;
};

class MapStage : public ParallelStage {
 public:
  MapStage(const DatasetNode& node, Stage& child, int id, int workers)
      : ParallelStage(
            node.stage_name(), "map", workers,
            queue_capacity(node.map_options.prefetch_size, config::get_rows_per_block(), workers),
            id, child),
        node_(node) {
    // In place when one column becomes one column at the same position.
    in_place_ = node.num_outputs == 1 && node.input_index.size() == 1 &&
                node.output_plan.size() == node.children[0]->columns.size();
    if (in_place_) {
      for (size_t i = 0; i < node.output_plan.size(); ++i) {
        int expect = int(i) == node.input_index[0] ? -1 : int(i);
        if (node.output_plan[i] != expect) in_place_ = false;
      }
    }
  }

 protected:
  void process(Pipeline& p, Block& block) override {
    std::vector<Tensor> cols;
    for (size_t i = 0; i < block.rows.size(); ++i) {
      Row& r = block.rows[i];
      RowRng rng(mix_seed(p.seed(), uint64_t(id), uint64_t(block.first_row) + i));
      rng.inputs_owned = true;
      cols.clear();
      // Copies, not moves: the row keeps its input tensors alive until the chain ends, so no
      // transform can take memory the source lent (a memory-mapped record, a user's array) for
      // its own and overwrite it in place (see RowRng::inputs_owned).
      for (int idx : node_.input_index) cols.push_back(r.columns[size_t(idx)]);
      for (const Op& op : node_.ops) {
        try {
          op->apply(cols, rng);
        } catch (const std::exception& e) {
          throw Error(name + ": transform " + op->name() + " failed on " + describe_row(r) + ": " +
                      e.what());
        }
      }
      if (int(cols.size()) != node_.num_outputs) {
        throw Error(kiln::detail::concat(name, ": the operations returned ", cols.size(),
                                         " columns for ", describe_row(r),
                                         ", but output_columns names ", node_.num_outputs));
      }
      if (in_place_) {
        r.columns[size_t(node_.input_index[0])] = std::move(cols[0]);
        continue;
      }
      std::vector<Tensor> next;
      next.reserve(node_.output_plan.size());
      for (int k : node_.output_plan) {
        next.push_back(k >= 0 ? std::move(r.columns[size_t(k)]) : std::move(cols[size_t(-1 - k)]));
      }
      r.columns = std::move(next);
    }
  }

 private:
  const DatasetNode& node_;
  bool in_place_ = false;
};

// Copies `src` (contiguous, shape s) into the top-left corner of `dst` (contiguous, shape d).
void copy_padded(const unsigned char* src, const Shape& s, unsigned char* dst, const Shape& d,
                 size_t es) {
  int r = s.rank();
  if (r == 0) {
    std::memcpy(dst, src, es);
    return;
  }
  int64_t inner = s[r - 1];
  int64_t outer = s.numel() / std::max<int64_t>(1, inner);
  if (inner == 0) return;
  std::vector<int64_t> idx(size_t(r), 0);
  Strides ds = contiguous_strides(d);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0;
    for (int k = 0; k < r - 1; ++k) off += idx[size_t(k)] * ds[size_t(k)];
    std::memcpy(dst + size_t(off) * es, src + size_t(o * inner) * es, size_t(inner) * es);
    for (int k = r - 2; k >= 0; --k) {
      if (++idx[size_t(k)] < s[k]) break;
      idx[size_t(k)] = 0;
    }
  }
}

// Copies the rows of a block into one batch tensor per column (padding where pad_info says), or
// with `gather`, has their source copy them (its rows carry only their row numbers).
class Collator {
 public:
  Collator(const DatasetNode& node, std::string name, bool gather)
      : node_(node), name(std::move(name)), gather_(gather) {
    const auto& cols = node.columns;
    pad_.resize(cols.size());
    for (size_t c = 0; c < cols.size(); ++c) {
      auto it = node.batch_options.pad_info.find(cols[c]);
      if (it != node.batch_options.pad_info.end()) pad_[c] = &it->second;
    }
  }

  void operator()(Block& block) const {
    if (gather_) {
      gather(block);
      return;
    }
    if (node_.batch_options.per_batch_map) apply_per_batch_map(block);
    auto& rows = block.rows;
    Row out;
    out.index = block.first_row;
    const size_t ncols = rows[0].columns.size();
    const int64_t n = int64_t(rows.size());
    out.columns.resize(ncols);
    for (size_t c = 0; c < ncols; ++c) {
      const Tensor& first = rows[0].columns[c];
      Shape shape = first.shape();
      for (int64_t i = 1; i < n; ++i) {
        const Tensor& t = rows[size_t(i)].columns[c];
        if (t.dtype() != first.dtype() || (!pad_[c] && t.shape() != shape) ||
            (pad_[c] && t.rank() != shape.rank())) {
          throw Error(kiln::detail::concat(
              name, ": column '", node_.columns[c], "' is ", describe(first), " in ",
              describe_row(rows[0]), " but ", describe(t), " in ", describe_row(rows[size_t(i)]),
              " (batch ", block.first_row, "); ",
              pad_[c] ? "padding needs the same rank and dtype"
                      : "rows of a batch must match: make them equal or give pad_info"));
        }
        if (pad_[c]) {
          for (int k = 0; k < shape.rank(); ++k) shape[k] = std::max(shape[k], t.shape()[k]);
        }
      }
      if (pad_[c] && pad_[c]->shape.rank() > 0) {
        const Shape& want = pad_[c]->shape;
        if (want.rank() != shape.rank()) {
          throw Error(kiln::detail::concat(name, ": pad_info shape ", want.str(), " for column '",
                                           node_.columns[c], "' has another rank than its rows ",
                                           shape.str()));
        }
        for (int k = 0; k < shape.rank(); ++k) {
          if (want[k] < 0) continue;
          if (want[k] < shape[k]) {
            throw Error(kiln::detail::concat(
                name, ": column '", node_.columns[c], "' has a row of ", "shape ", shape.str(),
                " larger than pad_info shape ", want.str(), " (batch ", block.first_row, ")"));
          }
          shape[k] = want[k];
        }
      }
      std::vector<int64_t> dims{n};
      dims.insert(dims.end(), shape.begin(), shape.end());
      Tensor batch = Tensor::empty(Shape(std::move(dims)), first.dtype());
      auto* dst = static_cast<unsigned char*>(batch.raw_data());
      const size_t es = dtype_size(first.dtype());
      const size_t row_bytes = size_t(shape.numel()) * es;
      if (pad_[c]) fill(dst, first.dtype(), pad_[c]->value, batch.numel());
      for (int64_t i = 0; i < n; ++i) {
        Tensor t = rows[size_t(i)].columns[c].contiguous();
        auto* src = static_cast<const unsigned char*>(t.raw_data());
        if (!pad_[c] || t.shape() == shape) {
          std::memcpy(dst + size_t(i) * row_bytes, src, row_bytes);
        } else {
          copy_padded(src, t.shape(), dst + size_t(i) * row_bytes, shape, es);
        }
      }
      out.columns[c] = std::move(batch);
    }
    rows.clear();
    rows.push_back(std::move(out));
  }

 private:
  void gather(Block& block) const {
    std::vector<int64_t> indices;
    indices.reserve(block.rows.size());
    for (const Row& r : block.rows) indices.push_back(r.index);
    const Source& source = *block.rows[0].source;
    Row out;
    out.index = block.first_row;
    try {
      source.gather_rows(indices, out.columns);
    } catch (const std::exception& e) {
      throw Error(kiln::detail::concat(name, ": failed to gather ", indices.size(),
                                       " rows (the first: ", source.describe(indices.front()),
                                       "): ", e.what()));
    }
    if (out.columns.size() != node_.columns.size()) {
      throw Error(kiln::detail::concat(name, ": ", source.name(), " gathered ", out.columns.size(),
                                       " columns, but the source declares ", node_.columns.size()));
    }
    block.rows.clear();
    block.rows.push_back(std::move(out));
  }

  void apply_per_batch_map(Block& block) const {
    const size_t ncols = node_.columns.size();
    std::vector<std::vector<Tensor>> columns(ncols);
    for (Row& r : block.rows) {
      for (size_t c = 0; c < ncols; ++c) columns[c].push_back(std::move(r.columns[c]));
    }
    const std::string where = kiln::detail::concat(name, ": per_batch_map on batch ",
                                                   block.batch_num, " of epoch ", block.epoch_num);
    try {
      node_.batch_options.per_batch_map(columns, {block.batch_num, block.epoch_num});
    } catch (const std::exception& e) {
      throw Error(where + ": " + e.what());
    }
    if (columns.size() != ncols) {
      throw Error(
          kiln::detail::concat(where, " returned ", columns.size(), " columns, not ", ncols));
    }
    const size_t n = columns[0].size();
    for (size_t c = 0; c < ncols; ++c) {
      if (columns[c].size() != n || n == 0) {
        throw Error(kiln::detail::concat(where, " returned ", columns[c].size(),
                                         " rows of column '", node_.columns[c], "' and ", n,
                                         " of column '", node_.columns[0],
                                         "': every column needs one row or more, "
                                         "as many as the others"));
      }
    }
    block.rows.resize(n);
    for (size_t i = 0; i < n; ++i) {
      block.rows[i].columns.resize(ncols);
      for (size_t c = 0; c < ncols; ++c) block.rows[i].columns[c] = std::move(columns[c][i]);
    }
  }

  const DatasetNode& node_;
  std::string name;
  bool gather_;
  std::vector<const PadInfo*> pad_;
};

// Regroups rows into blocks of exactly batch_size rows (fewer at an epoch's end). With one batch
// worker it also collates them (one thread, one hand-off fewer); with more, BatchStage's workers
// do.
class BatchGroupStage : public Stage {
 public:
  BatchGroupStage(const DatasetNode& node, Stage& child, int id, bool collate, bool gather)
      : Stage(collate ? node.stage_name() : "batch.group", collate ? "batch" : "batch.group", 1,
              // Uncollated blocks are whole batches waiting for a copying worker.
              collate ? queue_capacity(node.batch_options.prefetch_size, 1, 1)
                      : std::max(2, 2 * node.batch_options.num_parallel_workers),
              id),
        child_(child),
        batch_size_(node.batch_size),
        drop_remainder_(node.drop_remainder) {
    if (collate) collate_ = std::make_unique<Collator>(node, node.stage_name(), gather);
  }

  void start(Pipeline& p) override {
    p.spawn(*this, [this] { work(); });
  }

 private:
  void work() {
    WorkerClock clock(counters);
    Block in, pending;
    int64_t seq = 0, batch_no = 0, epoch = 0, batch_in_epoch = 0;
    auto emit_pending = [&]() {
      pending.first_row = batch_no++;
      pending.batch_num = batch_in_epoch++;
      pending.epoch_num = epoch;
      if (collate_) (*collate_)(pending);
      Block b = std::move(pending);
      pending = Block();
      pending.rows.reserve(size_t(batch_size_));
      return push(clock, seq++, std::move(b));
    };
    pending.rows.reserve(size_t(batch_size_));
    while (pop(clock, child_.out, in)) {
      if (in.epoch_end) {
        if (!pending.rows.empty()) {
          if (drop_remainder_) {
            pending.rows.clear();
          } else if (!emit_pending()) {
            return;
          }
        }
        ++epoch;
        batch_in_epoch = 0;
        Block marker;
        marker.epoch_end = true;
        if (!push(clock, seq++, std::move(marker))) return;
        continue;
      }
      for (Row& r : in.rows) {
        pending.rows.push_back(std::move(r));
        if (int64_t(pending.rows.size()) == batch_size_ && !emit_pending()) return;
      }
    }
    if (!child_.out.aborted()) out.close(seq);
  }

  Stage& child_;
  int64_t batch_size_;
  bool drop_remainder_;
  std::unique_ptr<Collator> collate_;
};

class BatchStage : public ParallelStage {
 public:
  BatchStage(const DatasetNode& node, Stage& child, int id, int workers, bool gather)
      : ParallelStage(node.stage_name(), "batch", workers,
                      queue_capacity(node.batch_options.prefetch_size, 1, workers), id, child),
        collate_(node, node.stage_name(), gather) {}

 protected:
  void process(Pipeline&, Block& block) override { collate_(block); }

 private:
  Collator collate_;
};

}  // namespace

std::unique_ptr<Stage> make_map_stage(const DatasetNode& node, Stage& child, int id) {
  int workers = node.map_options.num_parallel_workers;
  if (workers <= 0) workers = config::get_num_parallel_workers();
  return std::make_unique<MapStage>(node, child, id, workers);
}

std::unique_ptr<Stage> make_batch_group_stage(const DatasetNode& node, Stage& child, int id,
                                              bool collate, bool gather) {
  return std::make_unique<BatchGroupStage>(node, child, id, collate, gather);
}

std::unique_ptr<Stage> make_batch_stage(const DatasetNode& node, Stage& child, int id,
                                        bool gather) {
  int workers = std::max(1, node.batch_options.num_parallel_workers);
  return std::make_unique<BatchStage>(node, child, id, workers, gather);
}

}  // namespace kiln::data::detail
