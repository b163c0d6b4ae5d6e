#pragma once
// The transform interface used by Dataset::map, and the per-row random generator.
#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::data {

// A small, fast generator seeded per row (from the pipeline seed, the stage and the row's position
// in the stream), so random transforms give the same result whatever thread runs them.
class RowRng {
 public:
  explicit RowRng(uint64_t seed = 0) : state_(seed) {}
  uint64_t next_u64() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [lo, hi] (inclusive).
  int64_t randint(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    uint64_t span = uint64_t(hi - lo) + 1;
    return lo + int64_t(next_u64() % span);
  }
  bool bernoulli(double p) { return uniform() < p; }

  // Set by the pipeline's map stage: a transform may write its result into an input tensor that no
  // other handle or view shares (see vision/image.h exclusive()) instead of allocating. The map
  // keeps the row's original inputs alive through its chain, so only tensors made by an earlier
  // transform of the chain can qualify; transforms must therefore return memory they own (or
  // views of their input), never borrowed memory. False when a transform is called directly, so
  // a caller's tensors are never modified.
  bool inputs_owned = false;

 private:
  uint64_t state_;
};

// Mixes values into one 64-bit seed (for per-row and per-epoch seeds).
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

// One operation of Dataset::map. Transforms are immutable after construction and are called from
// several pipeline threads at once: keep per-call state on the stack.
class TensorTransform {
 public:
  virtual ~TensorTransform() = default;
  virtual std::string name() const = 0;
  // Columns in, columns out. The default calls apply_one() on a single column.
  virtual void apply(std::vector<Tensor>& columns, RowRng& rng) const;
  // One tensor in, one out; transforms of one column override this.
  virtual Tensor apply_one(const Tensor& input, RowRng& rng) const;
};

// A handle to a transform; any TensorTransform value converts to it, so
// `ds.map({vision::Decode(), vision::Rescale(1.0 / 255, 0)}, {"image"})` reads like MindSpore.
class Op {
 public:
  template <class T>
  requires std::derived_from<std::decay_t<T>, TensorTransform> Op(
      T&& transform)  // NOLINT: implicit on purpose
      : impl_(std::make_shared<std::decay_t<T>>(std::forward<T>(transform))) {}
  Op(std::shared_ptr<const TensorTransform> impl) : impl_(std::move(impl)) {}  // NOLINT

  const TensorTransform& operator*() const { return *impl_; }
  const TensorTransform* operator->() const { return impl_.get(); }
  const std::shared_ptr<const TensorTransform>& ptr() const { return impl_; }

 private:
  std::shared_ptr<const TensorTransform> impl_;
};

}  // namespace kiln::data
