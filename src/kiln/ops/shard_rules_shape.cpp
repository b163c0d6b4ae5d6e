// The shard rules of the shape ops whose attributes name positions or sizes of the whole tensor:
// concat, slice and its zero-padding inverse pad_slice_grad, one_hot, broadcast_to and
// sum_to_shape. The dimension an op works along stays whole; the others split freely, and the
// local op gets its attributes for the local shapes.
#include "kiln/ops/detail/shard_form.h"

namespace kiln::ops {
namespace {

using namespace shard;

// ---- concat(x0, x1, ... ; axis) ----

ShardedForm concat_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  const size_t axis = dim_index(attrs.as<AxisAttrs>().axis, in[0].shape.rank());
  for (size_t i = 0; i < in.size(); ++i) {
    if (s[i][axis] != 1) {
      refuse(detail::concat(
          "the concatenation axis ", axis,
          " cannot be split: each rank's blocks of the inputs would interleave in the result"));
    }
    if (s[i] != s[0])
      refuse(detail::concat("inputs 0 and ", i, " split differently; all split alike"));
  }
  ShardedForm f;
  const Map m = split_each(f, s[0]);
  f.input_maps.assign(in.size(), m);
  f.output_maps = {m};
  f.output_partial = {{}};
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> concat_follow(std::span<const TensorMeta> in, const Attrs& attrs, int,
                                      const Parts& parts) {
  const int rank = in[0].shape.rank();
  if (int(parts.size()) != rank) return std::nullopt;
  Parts p = parts;
  p[dim_index(attrs.as<AxisAttrs>().axis, rank)] = 1;
  return Strategy(in.size(), p);
}

// ---- slice(x; axis, start, end, step) and pad_slice_grad(grad; ..., shape) ----

constexpr char kSlicedAxisWhole[] =
    "the sliced axis cannot be split: start, end and step count positions of the whole "
    "dimension";

ShardedForm slice_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  const SliceAttrs& a = attrs.as<SliceAttrs>();
  const size_t axis = dim_index(a.axis, in[0].shape.rank());
  if (s[0][axis] != 1) refuse(kSlicedAxisWhole);
  ShardedForm f;
  const Map m = split_each(f, s[0]);
  f.input_maps = {m};
  f.output_maps = {m};
  f.output_partial = {{}};
  SliceAttrs local = a;
  // pad_slice_grad's output shape: each rank's block of it.
  for (size_t d = 0; d < local.shape.size() && d < s[0].size(); ++d) local.shape[d] /= s[0][d];
  f.local_attrs = local;
  return f;
}

std::optional<Strategy> slice_follow(std::span<const TensorMeta> in, const Attrs& attrs, int,
                                     const Parts& parts) {
  const int rank = in[0].shape.rank();
  if (int(parts.size()) != rank) return std::nullopt;
  Parts p = parts;
  p[dim_index(attrs.as<SliceAttrs>().axis, rank)] = 1;
  return Strategy{p};
}

// ---- one_hot(indices [...]) -> [..., num_classes] ----

ShardedForm one_hot_form(std::span<const TensorMeta>, const Attrs& attrs, const Strategy& s) {
  ShardedForm f;
  const Map m = split_each(f, s[0]);
  Map out = m;
  out.push_back(kNotSplit);
  f.input_maps = {m};
  f.output_maps = {out};
  f.output_partial = {{}};
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> one_hot_follow(std::span<const TensorMeta> in, const Attrs&, int index,
                                       const Parts& parts) {
  const size_t rank = size_t(in[0].shape.rank());
  if (parts.size() != (index < 0 ? rank + 1 : rank)) return std::nullopt;
  return Strategy{Parts(parts.begin(), parts.begin() + long(rank))};
}

// ---- broadcast_to(x; shape) and sum_to_shape(x; shape): NumPy broadcasting from the right ----

// For each dimension of `big`, the dimension of `small` it broadcasts from, or -1 where `small`
// has none or has 1 against a larger size (broadcast_to repeats it, sum_to_shape sums it).
std::vector<int> kept_dims(const Shape& small, const std::vector<int64_t>& big) {
  const int shift = int(big.size()) - small.rank();
  std::vector<int> from(big.size(), -1);
  for (int j = 0; j < small.rank(); ++j) {
    if (small[j] == big[size_t(shift + j)]) from[size_t(shift + j)] = j;
  }
  return from;
}

ShardedForm broadcast_to_form(std::span<const TensorMeta> in, const Attrs& attrs,
                              const Strategy& s) {
  const std::vector<int64_t>& target = attrs.as<ShapeAttrs>().shape;
  const std::vector<int> from = kept_dims(in[0].shape, target);
  ShardedForm f;
  const Map m = split_each(f, s[0]);
  Map out(target.size(), kNotSplit);
  std::vector<int64_t> local = target;
  for (size_t d = 0; d < target.size(); ++d) {
    if (from[d] < 0) continue;
    out[d] = m[size_t(from[d])];
    local[d] /= s[0][size_t(from[d])];
  }
  f.input_maps = {m};
  f.output_maps = {out};
  f.output_partial = {{}};
  f.local_attrs = ShapeAttrs{.shape = local};
  return f;
}

std::optional<Strategy> broadcast_to_follow(std::span<const TensorMeta> in, const Attrs& attrs,
                                            int index, const Parts& parts) {
  if (index >= 0) return Strategy{parts};
  const std::vector<int64_t>& target = attrs.as<ShapeAttrs>().shape;
  if (parts.size() != target.size()) return std::nullopt;
  const std::vector<int> from = kept_dims(in[0].shape, target);
  Parts p(size_t(in[0].shape.rank()), 1);
  for (size_t d = 0; d < target.size(); ++d) {
    if (from[d] >= 0) p[size_t(from[d])] = parts[d];
  }
  return Strategy{p};
}

ShardedForm sum_to_shape_form(std::span<const TensorMeta> in, const Attrs& attrs,
                              const Strategy& s) {
  const std::vector<int64_t>& target = attrs.as<ShapeAttrs>().shape;
  const Shape small(target);
  const std::vector<int> to = kept_dims(small, in[0].shape.dims());
  ShardedForm f;
  const Map m = split_each(f, s[0]);
  Map out(target.size(), kNotSplit), partial;
  std::vector<int64_t> local = target;
  for (size_t d = 0; d < m.size(); ++d) {
    if (to[d] >= 0) {
      out[size_t(to[d])] = m[d];
      local[size_t(to[d])] /= s[0][d];
    } else if (m[d] != kNotSplit) {
      partial.push_back(m[d]);
    }
  }
  f.input_maps = {m};
  f.output_maps = {out};
  f.output_partial = {partial};
  f.local_attrs = ShapeAttrs{.shape = local};
  if (!partial.empty()) {
    f.communication = "a summed dimension is split: each rank's result is a partial sum";
  }
  return f;
}

std::optional<Strategy> sum_to_shape_follow(std::span<const TensorMeta> in, const Attrs& attrs,
                                            int index, const Parts& parts) {
  if (index >= 0) return Strategy{parts};
  const std::vector<int64_t>& target = attrs.as<ShapeAttrs>().shape;
  if (parts.size() != target.size()) return std::nullopt;
  const std::vector<int> to = kept_dims(Shape(target), in[0].shape.dims());
  Parts p(size_t(in[0].shape.rank()), 1);
  for (size_t d = 0; d < p.size(); ++d) {
    if (to[d] >= 0) p[d] = parts[size_t(to[d])];
  }
  return Strategy{p};
}

}  // namespace

const ShardRule kConcatShardRule = {
    .accepts = "any split but the concatenation axis, every input split alike",
    .form = concat_form,
    .follow = concat_follow,
};
const ShardRule kSliceShardRule = {
    .accepts = "any split but the sliced axis",
    .form = slice_form,
    .follow = slice_follow,
};
const ShardRule kOneHotShardRule = {
    .accepts = "any split of the indices; the class dimension of the result whole",
    .form = one_hot_form,
    .follow = one_hot_follow,
};
const ShardRule kBroadcastToShardRule = {
    .accepts =
        "any split of the input's dimensions that are not broadcast; the result splits alike",
    .form = broadcast_to_form,
    .follow = broadcast_to_follow,
};
const ShardRule kSumToShapeShardRule = {
    .accepts = "any split; a split summed dimension makes partial sums",
    .form = sum_to_shape_form,
    .follow = sum_to_shape_follow,
};

}  // namespace kiln::ops
