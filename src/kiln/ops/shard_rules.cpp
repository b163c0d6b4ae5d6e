// The shard rules the op table points to (OpDef::shard). Each says, for one strategy, the op's
// device matrix, its inputs' and outputs' tensor maps and which outputs are partial sums; and
// for sharding propagation, which strategy follows from a neighbour's split.
#include <algorithm>
#include <numeric>

#include "kiln/ops/detail/shard_form.h"

namespace kiln::ops {
namespace {

using namespace shard;

std::vector<int64_t> dims_of(const TensorMeta& m) {
  return m.shape.dims();
}

// ---- elementwise (broadcasting from the right) ----

std::vector<int64_t> broadcast_dims(std::span<const TensorMeta> in) {
  size_t rank = 0;
  for (const TensorMeta& m : in) rank = std::max(rank, size_t(m.shape.rank()));
  std::vector<int64_t> out(rank, 1);
  for (const TensorMeta& m : in) {
    const size_t off = rank - size_t(m.shape.rank());
    for (int j = 0; j < m.shape.rank(); ++j)
      out[off + size_t(j)] = std::max(out[off + size_t(j)], m.shape[j]);
  }
  return out;
}

ShardedForm elementwise_form(std::span<const TensorMeta> in, const Attrs& attrs,
                             const Strategy& s) {
  const std::vector<int64_t> out = broadcast_dims(in);
  Parts out_parts(out.size(), 1);
  std::vector<int> decided_by(out.size(), -1);
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t off = out.size() - size_t(in[i].shape.rank());
    for (int j = 0; j < in[i].shape.rank(); ++j) {
      const size_t d = off + size_t(j);
      const int64_t p = s[i][size_t(j)];
      if (in[i].shape[j] != out[d]) {
        if (p != 1) {
          refuse(detail::concat("input ", i, " is broadcast along dimension ", j,
                                " and cannot be split there"));
        }
        continue;
      }
      if (decided_by[d] < 0) {
        decided_by[d] = int(i);
        out_parts[d] = p;
      } else if (out_parts[d] != p) {
        refuse(detail::concat("inputs ", decided_by[d], " and ", i, " split output dimension ", d,
                              " differently (", out_parts[d], " and ", p,
                              " parts); elementwise inputs split alike"));
      }
    }
  }
  ShardedForm f;
  Map out_map(out.size());
  for (size_t d = 0; d < out.size(); ++d) out_map[d] = axis_for(f, out_parts[d]);
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t off = out.size() - size_t(in[i].shape.rank());
    Map m(size_t(in[i].shape.rank()));
    for (int j = 0; j < in[i].shape.rank(); ++j) {
      m[size_t(j)] = in[i].shape[j] == out[off + size_t(j)] ? out_map[off + size_t(j)] : kNotSplit;
    }
    f.input_maps.push_back(m);
  }
  f.output_maps = {out_map};
  f.output_partial = {{}};
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> elementwise_follow(std::span<const TensorMeta> in, const Attrs&, int index,
                                           const Parts& parts) {
  const std::vector<int64_t> out = broadcast_dims(in);
  Parts out_parts(out.size(), 1);
  if (index < 0) {
    if (parts.size() != out.size()) return std::nullopt;
    out_parts = parts;
  } else {
    const TensorMeta& m = in[size_t(index)];
    const size_t off = out.size() - size_t(m.shape.rank());
    for (int j = 0; j < m.shape.rank(); ++j) {
      if (m.shape[j] == out[off + size_t(j)]) out_parts[off + size_t(j)] = parts[size_t(j)];
    }
  }
  Strategy s;
  for (const TensorMeta& m : in) {
    const size_t off = out.size() - size_t(m.shape.rank());
    Parts p(size_t(m.shape.rank()), 1);
    for (int j = 0; j < m.shape.rank(); ++j) {
      if (m.shape[j] == out[off + size_t(j)]) p[size_t(j)] = out_parts[off + size_t(j)];
    }
    s.push_back(p);
  }
  return s;
}

// ---- matmul ----

struct MatmulAxes {
  int ra, rb;
  int a_m, a_k, b_k, b_n;
  bool b_batched;
};

MatmulAxes matmul_axes(std::span<const TensorMeta> in, const Attrs& attrs) {
  const MatmulAttrs& a = attrs.as<MatmulAttrs>();
  MatmulAxes x{};
  x.ra = in[0].shape.rank();
  x.rb = in[1].shape.rank();
  if (x.ra < 2 || !(x.rb == 2 || x.rb == x.ra)) {
    refuse("the rule takes A of rank >= 2 and B of rank 2 or of A's rank");
  }
  x.a_m = a.transpose_a ? x.ra - 1 : x.ra - 2;
  x.a_k = a.transpose_a ? x.ra - 2 : x.ra - 1;
  x.b_k = a.transpose_b ? x.rb - 1 : x.rb - 2;
  x.b_n = a.transpose_b ? x.rb - 2 : x.rb - 1;
  x.b_batched = x.rb == x.ra && x.ra > 2;
  return x;
}

ShardedForm matmul_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  const MatmulAxes x = matmul_axes(in, attrs);
  const int64_t m = s[0][size_t(x.a_m)], k = s[0][size_t(x.a_k)], kb = s[1][size_t(x.b_k)],
                n = s[1][size_t(x.b_n)];
  if (k != kb) {
    refuse(detail::concat("A splits the contracted dimension in ", k, " parts but B in ", kb,
                          "; they must agree"));
  }
  ShardedForm f;
  Map out_map;
  Map a_map(size_t(x.ra), kNotSplit), b_map(size_t(x.rb), kNotSplit);
  for (int d = 0; d < x.ra - 2; ++d) {
    const int64_t p = s[0][size_t(d)];
    if (x.b_batched && s[1][size_t(d)] != p) {
      refuse(detail::concat("A and B split batch dimension ", d, " differently"));
    }
    const int axis = axis_for(f, p);
    a_map[size_t(d)] = axis;
    if (x.b_batched) b_map[size_t(d)] = axis;
    out_map.push_back(axis);
  }
  const int am = axis_for(f, m), ak = axis_for(f, k), bn = axis_for(f, n);
  a_map[size_t(x.a_m)] = am;
  a_map[size_t(x.a_k)] = ak;
  b_map[size_t(x.b_k)] = ak;
  b_map[size_t(x.b_n)] = bn;
  out_map.push_back(am);
  out_map.push_back(bn);
  f.input_maps = {a_map, b_map};
  f.output_maps = {out_map};
  f.output_partial = {ak == kNotSplit ? Map{} : Map{ak}};
  f.local_attrs = attrs;
  if (k > 1) {
    f.communication =
        detail::concat("the contracted dimension is split in ", k,
                       ": each rank's product is a partial sum, reduced over those ", k, " ranks");
  }
  return f;
}

std::optional<Strategy> matmul_follow(std::span<const TensorMeta> in, const Attrs& attrs, int index,
                                      const Parts& parts) {
  const MatmulAxes x = matmul_axes(in, attrs);
  Parts a(size_t(x.ra), 1), b(size_t(x.rb), 1);
  if (index == 0) {
    a = parts;
    if (x.b_batched) {
      for (int d = 0; d < x.ra - 2; ++d) b[size_t(d)] = parts[size_t(d)];
    }
    b[size_t(x.b_k)] = parts[size_t(x.a_k)];
  } else if (index == 1) {
    b = parts;
    if (x.b_batched) {
      for (int d = 0; d < x.ra - 2; ++d) a[size_t(d)] = parts[size_t(d)];
    }
    a[size_t(x.a_k)] = parts[size_t(x.b_k)];
  } else {
    if (int(parts.size()) != x.ra) return std::nullopt;
    for (int d = 0; d < x.ra - 2; ++d) {
      a[size_t(d)] = parts[size_t(d)];
      if (x.b_batched) b[size_t(d)] = parts[size_t(d)];
    }
    a[size_t(x.a_m)] = parts[size_t(x.ra - 2)];
    b[size_t(x.b_n)] = parts[size_t(x.ra - 1)];
  }
  return Strategy{a, b};
}

// ---- reductions ----

std::vector<bool> reduced_dims(const TensorMeta& m, const std::vector<int64_t>& axes) {
  const int r = m.shape.rank();
  std::vector<bool> reduced(size_t(r), axes.empty());
  for (int64_t a : axes) {
    const int64_t d = a < 0 ? a + r : a;
    if (d >= 0 && d < r) reduced[size_t(d)] = true;
  }
  return reduced;
}

ShardedForm reduce_form(std::span<const TensorMeta> in, const std::vector<int64_t>& axes,
                        bool keepdims, const Strategy& s, bool allow_split_reduced) {
  const std::vector<bool> reduced = reduced_dims(in[0], axes);
  ShardedForm f;
  Map in_map, out_map, partial;
  for (size_t d = 0; d < reduced.size(); ++d) {
    const int64_t p = s[0][d];
    if (reduced[d] && p > 1 && !allow_split_reduced) {
      refuse(detail::concat("dimension ", d,
                            " is reduced and cannot be split (the result "
                            "would need a reduction across ranks that this op has no rule for)"));
    }
    const int axis = axis_for(f, p);
    in_map.push_back(axis);
    if (reduced[d]) {
      if (axis != kNotSplit) partial.push_back(axis);
      if (keepdims) out_map.push_back(kNotSplit);
    } else {
      out_map.push_back(axis);
    }
  }
  f.input_maps = {in_map};
  f.output_maps = {out_map};
  f.output_partial = {partial};
  if (!partial.empty()) {
    f.communication = "a reduced dimension is split: each rank's result is a partial sum";
  }
  return f;
}

std::optional<Strategy> reduce_follow(std::span<const TensorMeta> in,
                                      const std::vector<int64_t>& axes, bool keepdims, int index,
                                      const Parts& parts) {
  if (index >= 0) return Strategy{parts};
  const std::vector<bool> reduced = reduced_dims(in[0], axes);
  Parts p(reduced.size(), 1);
  size_t j = 0;
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (reduced[d]) {
      j += keepdims ? 1 : 0;
      continue;
    }
    if (j >= parts.size()) return std::nullopt;
    p[d] = parts[j++];
  }
  return Strategy{p};
}

ShardedForm sum_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  ShardedForm f = reduce_form(in, a.axes, a.keepdims, s, true);
  f.local_attrs = attrs;
  return f;
}

ShardedForm mean_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  ShardedForm f = reduce_form(in, a.axes, a.keepdims, s, true);
  f.local_attrs = attrs;
  const std::vector<bool> reduced = reduced_dims(in[0], a.axes);
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (reduced[d]) f.output_scale /= double(s[0][d]);
  }
  return f;
}

ShardedForm max_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  ShardedForm f = reduce_form(in, a.axes, a.keepdims, s, false);
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> reduce_follow_attrs(std::span<const TensorMeta> in, const Attrs& attrs,
                                            int index, const Parts& parts) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  return reduce_follow(in, a.axes, a.keepdims, index, parts);
}

std::optional<Strategy> max_follow(std::span<const TensorMeta> in, const Attrs& attrs, int index,
                                   const Parts& parts) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  std::optional<Strategy> s = reduce_follow(in, a.axes, a.keepdims, index, parts);
  if (!s) return s;
  const std::vector<bool> reduced = reduced_dims(in[0], a.axes);
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (reduced[d]) (*s)[0][d] = 1;
  }
  return s;
}

// ---- reshape: one split dimension, kept whole across the reshape ----

std::vector<int64_t> reshape_target(const TensorMeta& in, const Attrs& attrs) {
  std::vector<int64_t> out = attrs.as<ShapeAttrs>().shape;
  int64_t known = 1, unknown = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      unknown = int64_t(i);
    } else {
      known *= out[i];
    }
  }
  if (unknown >= 0 && known > 0) out[size_t(unknown)] = in.shape.numel() / known;
  return out;
}

// The dimension of `to` that dimension `d` of `from` split in `p` parts becomes: the same
// product of the dimensions before it, and divisible by p. -1 if none.
int matching_dim(const std::vector<int64_t>& from, const std::vector<int64_t>& to, size_t d,
                 int64_t p) {
  const int64_t before = product(from, 0, d);
  int64_t acc = 1;
  for (size_t j = 0; j < to.size(); ++j) {
    if (acc == before && to[j] % p == 0 && to[j] > 1) return int(j);
    acc *= to[j];
    if (acc > before) break;
  }
  return -1;
}

int single_split(const Parts& parts) {
  int split = -1;
  for (size_t d = 0; d < parts.size(); ++d) {
    if (parts[d] == 1) continue;
    if (split >= 0) refuse("the reshape rule takes at most one split dimension");
    split = int(d);
  }
  return split;
}

ShardedForm reshape_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  const std::vector<int64_t> from = dims_of(in[0]), to = reshape_target(in[0], attrs);
  ShardedForm f;
  Map in_map(from.size(), kNotSplit), out_map(to.size(), kNotSplit);
  std::vector<int64_t> local = to;
  const int split = single_split(s[0]);
  if (split >= 0) {
    const int64_t p = s[0][size_t(split)];
    const int j = matching_dim(from, to, size_t(split), p);
    if (j < 0) {
      refuse(detail::concat("dimension ", split, " does not survive the reshape to ",
                            Shape(to).str(), " as one dimension divisible by ", p));
    }
    const int axis = axis_for(f, p);
    in_map[size_t(split)] = axis;
    out_map[size_t(j)] = axis;
    local[size_t(j)] /= p;
  }
  f.input_maps = {in_map};
  f.output_maps = {out_map};
  f.output_partial = {{}};
  f.local_attrs = ShapeAttrs{.shape = local};
  return f;
}

std::optional<Strategy> reshape_follow(std::span<const TensorMeta> in, const Attrs& attrs,
                                       int index, const Parts& parts) {
  const std::vector<int64_t> from = dims_of(in[0]), to = reshape_target(in[0], attrs);
  try {
    if (index >= 0) {
      reshape_form(in, attrs, {parts});
      return Strategy{parts};
    }
    if (parts.size() != to.size()) return std::nullopt;
    Parts p(from.size(), 1);
    const int split = single_split(parts);
    if (split >= 0) {
      const int i = matching_dim(to, from, size_t(split), parts[size_t(split)]);
      if (i < 0) return std::nullopt;
      p[size_t(i)] = parts[size_t(split)];
    }
    reshape_form(in, attrs, {p});
    return Strategy{p};
  } catch (const ShapeError&) {
    return std::nullopt;
  }
}

// ---- transpose ----

ShardedForm transpose_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  const std::vector<int64_t>& perm = attrs.as<PermuteAttrs>().perm;
  ShardedForm f;
  Map in_map;
  for (int64_t p : s[0]) in_map.push_back(axis_for(f, p));
  Map out_map;
  for (int64_t d : perm) out_map.push_back(in_map[size_t(d)]);
  f.input_maps = {in_map};
  f.output_maps = {out_map};
  f.output_partial = {{}};
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> transpose_follow(std::span<const TensorMeta>, const Attrs& attrs, int index,
                                         const Parts& parts) {
  if (index >= 0) return Strategy{parts};
  const std::vector<int64_t>& perm = attrs.as<PermuteAttrs>().perm;
  if (parts.size() != perm.size()) return std::nullopt;
  Parts p(perm.size(), 1);
  for (size_t d = 0; d < perm.size(); ++d) p[size_t(perm[d])] = parts[d];
  return Strategy{p};
}

// ---- softmax / log_softmax: the axis stays whole ----

size_t softmax_axis(const TensorMeta& m, const Attrs& attrs) {
  const int64_t a = attrs.as<AxisAttrs>().axis;
  return size_t(a < 0 ? a + m.shape.rank() : a);
}

ShardedForm softmax_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  const size_t axis = softmax_axis(in[0], attrs);
  if (s[0][axis] != 1) refuse(detail::concat("the softmax axis ", axis, " cannot be split"));
  ShardedForm f;
  Map m;
  for (int64_t p : s[0]) m.push_back(axis_for(f, p));
  f.input_maps = {m};
  f.output_maps = {m};
  f.output_partial = {{}};
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> softmax_follow(std::span<const TensorMeta> in, const Attrs& attrs, int,
                                       const Parts& parts) {
  if (int(parts.size()) != in[0].shape.rank()) return std::nullopt;
  Parts p = parts;
  p[softmax_axis(in[0], attrs)] = 1;
  return Strategy{p};
}

// ---- causal_mask(scores [..., T, S]): the query and key dimensions stay whole ----

// Which keys a query sees depends on its position among all T queries and S keys, so only the
// leading (batch, head) dimensions split.
ShardedForm causal_mask_form(std::span<const TensorMeta> in, const Attrs& attrs,
                             const Strategy& s) {
  const size_t r = size_t(in[0].shape.rank());
  if (product(s[0], r - 2, r) != 1) {
    refuse("the query and key dimensions (the last two) cannot be split");
  }
  ShardedForm f;
  Map m;
  for (int64_t p : s[0]) m.push_back(axis_for(f, p));
  f.input_maps = {m};
  f.output_maps = {m};
  f.output_partial = {{}};
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> causal_mask_follow(std::span<const TensorMeta> in, const Attrs&, int,
                                           const Parts& parts) {
  const size_t r = size_t(in[0].shape.rank());
  if (parts.size() != r) return std::nullopt;
  Parts p = parts;
  p[r - 2] = 1;
  p[r - 1] = 1;
  return Strategy{p};
}

// ---- softmax_cross_entropy(logits [N, C], labels [N] or [N, C]): the batch split ----

ShardedForm cross_entropy_form(std::span<const TensorMeta> in, const Attrs& attrs,
                               const Strategy& s) {
  const int64_t p = s[0][0];
  if (product(s[0], 1, s[0].size()) != 1 || product(s[1], 1, s[1].size()) != 1) {
    refuse("only the batch (dimension 0) can be split");
  }
  if (s[1][0] != p) refuse("logits and labels must split the batch alike");
  ShardedForm f;
  const int axis = axis_for(f, p);
  Map logits(size_t(in[0].shape.rank()), kNotSplit), labels(size_t(in[1].shape.rank()), kNotSplit);
  logits[0] = axis;
  labels[0] = axis;
  f.input_maps = {logits, labels};
  const int64_t reduction = attrs.as<CrossEntropyAttrs>().reduction;
  if (reduction == 2) {
    f.output_maps = {{axis}};
    f.output_partial = {{}};
  } else {
    f.output_maps = {Map(0)};
    f.output_partial = {axis == kNotSplit ? Map{} : Map{axis}};
    if (reduction == 0) f.output_scale = 1.0 / double(p);
    if (p > 1) f.communication = "each rank's loss covers its part of the batch: a partial sum";
  }
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> cross_entropy_follow(std::span<const TensorMeta> in, const Attrs&, int,
                                             const Parts& parts) {
  const int64_t p = parts.empty() ? 1 : parts[0];
  Parts a(size_t(in[0].shape.rank()), 1), b(size_t(in[1].shape.rank()), 1);
  a[0] = p;
  b[0] = p;
  return Strategy{a, b};
}

// ---- layer_norm(x, gamma, beta): the normalized trailing dimensions stay whole ----

ShardedForm layer_norm_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  const size_t r = size_t(in[0].shape.rank()), k = size_t(in[1].shape.rank());
  if (product(s[0], r - k, r) != 1) refuse("the normalized trailing dimensions cannot be split");
  if (!is_replicated({s[1], s[2]})) refuse("gamma and beta stay whole (all ones)");
  ShardedForm f;
  Map x;
  for (int64_t p : s[0]) x.push_back(axis_for(f, p));
  f.input_maps = {x, Map(k, kNotSplit), Map(k, kNotSplit)};
  const Map stat(x.begin(), x.begin() + long(r - k));
  f.output_maps = {x, stat, stat};
  f.output_partial = {{}, {}, {}};
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> layer_norm_follow(std::span<const TensorMeta> in, const Attrs&, int index,
                                          const Parts& parts) {
  const size_t r = size_t(in[0].shape.rank()), k = size_t(in[1].shape.rank());
  Parts x(r, 1);
  if (index <= 0 && parts.size() == r) {
    for (size_t d = 0; d + k < r; ++d) x[d] = parts[d];
  }
  return Strategy{x, Parts(k, 1), Parts(k, 1)};
}

// ---- embedding(table [V, D], indices): indices split any way, the table by columns ----

ShardedForm embedding_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  if (s[0][0] != 1) {
    refuse(
        "splitting the vocabulary (table dimension 0) is not supported; split the embedding "
        "dimension (1, q) or the indices");
  }
  ShardedForm f;
  Map idx;
  for (int64_t p : s[1]) idx.push_back(axis_for(f, p));
  const int col = axis_for(f, s[0][1]);
  Map out = idx;
  out.push_back(col);
  f.input_maps = {Map{kNotSplit, col}, idx};
  f.output_maps = {out};
  f.output_partial = {{}};
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> embedding_follow(std::span<const TensorMeta> in, const Attrs&, int index,
                                         const Parts& parts) {
  Parts table{1, 1}, idx(size_t(in[1].shape.rank()), 1);
  if (index == 0) {
    table[1] = parts[1];
  } else if (index == 1) {
    idx = parts;
  } else {
    if (parts.size() != idx.size() + 1) return std::nullopt;
    std::copy(parts.begin(), parts.end() - 1, idx.begin());
    table[1] = parts.back();
  }
  return Strategy{table, idx};
}

}  // namespace

const ShardRule kElementwiseShardRule = {
    .accepts = "any split; inputs split alike where they are not broadcast",
    .form = elementwise_form,
    .follow = elementwise_follow,
};
const ShardRule kMatmulShardRule = {
    .accepts =
        "((batch..., m, k), (k, n)): A and B split the contracted dimension k alike; a "
        "split k makes partial sums",
    .form = matmul_form,
    .follow = matmul_follow,
};
const ShardRule kSumShardRule = {
    .accepts = "any split; a split reduced dimension makes partial sums",
    .form = sum_form,
    .follow = reduce_follow_attrs,
};
const ShardRule kMeanShardRule = {
    .accepts =
        "any split; a split reduced dimension makes partial sums (each rank's mean "
        "scaled by 1/parts)",
    .form = mean_form,
    .follow = reduce_follow_attrs,
};
const ShardRule kMaxReduceShardRule = {
    .accepts = "splits of the dimensions that are not reduced",
    .form = max_form,
    .follow = max_follow,
};
const ShardRule kReshapeShardRule = {
    .accepts =
        "at most one split dimension, which must stay one dimension of the result (same "
        "product of the dimensions before it)",
    .form = reshape_form,
    .follow = reshape_follow,
};
const ShardRule kTransposeShardRule = {
    .accepts = "any split; the result's dimensions carry their source's split",
    .form = transpose_form,
    .follow = transpose_follow,
};
const ShardRule kSoftmaxShardRule = {
    .accepts = "any split but the softmax axis",
    .form = softmax_form,
    .follow = softmax_follow,
};
const ShardRule kCausalMaskShardRule = {
    .accepts = "splits of the leading dimensions; the last two (queries, keys) whole",
    .form = causal_mask_form,
    .follow = causal_mask_follow,
};
const ShardRule kCrossEntropyShardRule = {
    .accepts = "((p, 1), (p,)): the batch split; mean and sum reductions make partial sums",
    .form = cross_entropy_form,
    .follow = cross_entropy_follow,
};
const ShardRule kLayerNormShardRule = {
    .accepts = "splits of the dimensions that are not normalized; gamma and beta whole",
    .form = layer_norm_form,
    .follow = layer_norm_follow,
};
const ShardRule kEmbeddingShardRule = {
    .accepts = "((1, q), (indices...)): the table by embedding columns, the indices any way",
    .form = embedding_form,
    .follow = embedding_follow,
};

}  // namespace kiln::ops
