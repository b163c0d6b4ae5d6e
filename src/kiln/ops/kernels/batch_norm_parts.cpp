#include "kiln/ops/kernels/batch_norm_parts.h"

#include <string>

#include "kiln/comm/communicator.h"
#include "kiln/core/error.h"
#include "kiln/core/thread_group.h"

namespace kiln::ops {
namespace {

class ThreadSlices : public BatchParts {
 public:
  explicit ThreadSlices(const ThreadGroup::Member& member) : member_(member) {}
  std::vector<double> all_gather(std::span<const double> mine) const override {
    return member_.all_gather(mine);
  }
  bool updates_running_statistics() const override { return member_.index() == 0; }

 private:
  const ThreadGroup::Member& member_;
};

// The job's ranks, in rank order. The doubles travel as 8-byte integers: a gather moves bytes.
class RankShards : public BatchParts {
 public:
  std::vector<double> all_gather(std::span<const double> mine) const override {
    std::vector<double> all(mine.size() * size_t(comm::size()));
    comm::all_gather(mine.data(), all.data(), int64_t(mine.size()), DType::i64);
    return all;
  }
  bool updates_running_statistics() const override { return true; }
};

}  // namespace

std::unique_ptr<BatchParts> batch_parts(std::string_view op, const BatchNormAttrs& attrs) {
  const int64_t batch_slices = attrs.batch_slices;
  const bool sync_ranks = attrs.sync_ranks;
  if (!attrs.training) return nullptr;
  if (sync_ranks && batch_slices != 1) {
    throw Error(std::string(op) + ": statistics combined both across " +
                std::to_string(batch_slices) +
                " batch slices and across ranks; a data-parallel rank runs its batch whole");
  }
  if (sync_ranks) {
    return comm::initialized() && comm::size() > 1 ? std::make_unique<RankShards>() : nullptr;
  }
  if (batch_slices == 1) return nullptr;
  const ThreadGroup::Member* member = ThreadGroup::Member::current();
  if (batch_slices < 1 || member == nullptr || member->group().size() != batch_slices) {
    throw Error(std::string(op) + ": the batch is split into " + std::to_string(batch_slices) +
                " slices whose statistics are combined, but this thread runs " +
                (member == nullptr ? std::string("outside a group of slices")
                                   : "in a group of " + std::to_string(member->group().size())) +
                " (only a batch-split step runs such a graph)");
  }
  return std::make_unique<ThreadSlices>(*member);
}

}  // namespace kiln::ops
