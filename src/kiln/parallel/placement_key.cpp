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
  if (from.partial.empty()) return gather_seconds(from, to, dtype, model);
  const int64_t n = from.partial_ranks();
  const double bytes = local_bytes(from, dtype);
  PlacementKey reduced = from;
  reduced.partial.clear();
  double best = model.all_reduce(bytes, n) + gather_seconds(reduced, to, dtype, model);
  // Or a reduce_scatter along a whole dimension: each rank keeps the block of its place in its
  // partial group.
  for (size_t d = 0; d < from.dims.size(); ++d) {
    if (from.parts(d) != 1 || from.shape[int(d)] % n != 0) continue;
    PlacementKey scattered = reduced;
    scattered.dims[d] = from.partial;
    best = std::min(best,
                    model.reduce_scatter(bytes, n) + gather_seconds(scattered, to, dtype, model));
  }
  return best;
}

}  // namespace kiln::parallel
