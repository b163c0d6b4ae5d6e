#include "kiln/parallel/placement_key.h"

#include <algorithm>
#include <limits>

namespace kiln::parallel {
namespace {

using Digits = PlacementKey::Digits;

// Drops digits of one part and joins neighbours that read consecutive strides of the rank
// (size a at stride b * s, then size b at stride s: one digit of a * b at stride s), so equal
// placements have equal digits.
Digits normalized(const Digits& in) {
  Digits out;
  for (const PlacementKey::Digit& d : in) {
    if (d.size == 1) continue;
    if (!out.empty() && out.back().stride == d.size * d.stride) {
      out.back() = {out.back().size * d.size, d.stride};
    } else {
      out.push_back(d);
    }
  }
  return out;
}

int64_t product(const Digits& digits) {
  int64_t n = 1;
  for (const PlacementKey::Digit& d : digits) n *= d.size;
  return n;
}

double local_bytes(const PlacementKey& p, DType dtype) {
  double n = double(dtype_size(dtype));
  for (size_t d = 0; d < p.dims.size(); ++d) n *= double(p.shape[int(d)] / p.parts(d));
  return n;
}

// plan_redistribution's gathers from a placement without partial sums (slices cost nothing).
double gather_seconds(PlacementKey p, const PlacementKey& to, DType dtype,
                      const CommCostModel& model) {
  double seconds = 0;
  double bytes = local_bytes(p, dtype);
  for (size_t d = 0; d < p.dims.size(); ++d) {
    const int64_t n = p.parts(d);
    if (n == 1 || p.dims[d] == to.dims[d]) continue;
    p.dims[d].clear();
    bytes *= double(n);
    seconds += model.all_gather(bytes, n);
  }
  return seconds;
}

// plan_redistribution's plan_whole: gathering and slicing, or first an all_to_all moving the
// split of dimension a to dimension b where the target splits b with a's digits (b gathered
// whole first where it is split otherwise).
double whole_seconds(const PlacementKey& p, const PlacementKey& to, DType dtype,
                     const CommCostModel& model) {
  double best = gather_seconds(p, to, dtype, model);
  for (size_t a = 0; a < p.dims.size(); ++a) {
    const int64_t n = p.parts(a);
    if (n == 1) continue;
    for (size_t b = 0; b < p.dims.size(); ++b) {
      if (b == a || to.dims[b] != p.dims[a] || p.shape[int(b)] % n != 0) continue;
      PlacementKey q = p;
      double seconds = 0;
      if (!q.dims[b].empty()) {
        const int64_t m = q.parts(b);
        q.dims[b].clear();
        seconds += model.all_gather(local_bytes(q, dtype), m);
      }
      seconds += model.all_to_all(local_bytes(q, dtype), n);
      q.dims[b] = q.dims[a];
      q.dims[a].clear();
      seconds += whole_seconds(q, to, dtype, model);
      if (seconds < best - 1e-15) best = seconds;
    }
  }
  return best;
}

}  // namespace

PlacementKey PlacementKey::of(const TensorLayout& layout) {
  const std::vector<int64_t>& matrix = layout.device_matrix;
  std::vector<int64_t> stride(matrix.size(), 1);
  for (size_t a = matrix.size(); a-- > 1;) stride[a - 1] = stride[a] * matrix[a];
  PlacementKey key;
  key.shape = layout.shape;
  key.ranks = layout.ranks();
  for (int a : layout.tensor_map) {
    Digits d;
    if (a != ops::kNotSplit) d.push_back({matrix[size_t(a)], stride[size_t(a)]});
    key.dims.push_back(normalized(d));
  }
  std::vector<int> partial = layout.partial;
  std::sort(partial.begin(), partial.end());
  Digits p;
  for (int a : partial) p.push_back({matrix[size_t(a)], stride[size_t(a)]});
  key.partial = normalized(p);
  return key;
}

int64_t PlacementKey::parts(size_t dim) const {
  return product(dims[dim]);
}

int64_t PlacementKey::partial_ranks() const {
  return product(partial);
}

double redistribution_seconds(const PlacementKey& from, const PlacementKey& to, DType dtype,
                              const CommCostModel& model) {
  if (from.shape != to.shape || from.ranks != to.ranks || !to.partial.empty()) {
    return std::numeric_limits<double>::infinity();
  }
  if (from.partial.empty()) return whole_seconds(from, to, dtype, model);
  const int64_t n = from.partial_ranks();
  const double bytes = local_bytes(from, dtype);
  PlacementKey reduced = from;
  reduced.partial.clear();
  double best = model.all_reduce(bytes, n) + whole_seconds(reduced, to, dtype, model);
  // Or a reduce_scatter along a whole dimension: each rank keeps the block of its place in its
  // partial group.
  for (size_t d = 0; d < from.dims.size(); ++d) {
    if (from.parts(d) != 1 || from.shape[int(d)] % n != 0) continue;
    PlacementKey scattered = reduced;
    scattered.dims[d] = from.partial;
    best =
        std::min(best, model.reduce_scatter(bytes, n) + whole_seconds(scattered, to, dtype, model));
  }
  return best;
}

}  // namespace kiln::parallel
