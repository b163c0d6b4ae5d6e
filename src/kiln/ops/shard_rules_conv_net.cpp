// The shard rules of the convolution-net ops: conv2d, max_pool2d / avg_pool2d, batch_norm.
// MindSpore's terms as in shard_rules.cpp: the device matrix gets one axis per split
// dimension (batch, input channels, output channels, in that order), the tensor maps name them,
// and an input-channel split of a convolution leaves partial sums.
//
// Height and width never split: a window at a block border reads rows and columns the
// neighbouring rank holds (a halo exchange), which the partition does not build.
#include "kiln/ops/detail/shard_form.h"

namespace kiln::ops {
namespace {

using namespace shard;

constexpr char kSpatialWhole[] =
    "the height and width (dimensions 2 and 3) cannot be split: a window at a block border reads "
    "rows and columns of the neighbouring rank's block (a halo exchange), which is not built; "
    "split the batch or the channels";

// ---- conv2d(x [N, C, H, W], w [O, C/groups, KH, KW], bias [O]?) ----

ShardedForm conv_form(std::span<const TensorMeta> in, const Attrs& attrs, const Strategy& s) {
  const ConvAttrs& a = attrs.as<ConvAttrs>();
  const Parts &px = s[0], &pw = s[1];
  const bool has_bias = in.size() > 2;
  if (px[2] != 1 || px[3] != 1) refuse(kSpatialWhole);
  if (pw[2] != 1 || pw[3] != 1)
    refuse("the kernel's height and width (weight dimensions 2, 3) stay whole");
  const int64_t n = px[0], c = px[1], o = pw[0];
  if (has_bias && s[2][0] != o) {
    refuse(detail::concat("the bias splits in ", s[2][0],
                          " parts but the output channels (weight dimension 0) in ", o,
                          "; they must agree"));
  }
  ShardedForm f;
  ConvAttrs local = a;
  if (a.groups == 1) {
    if (pw[1] != c) {
      refuse(detail::concat("the input splits its channels (dimension 1) in ", c,
                            " parts but the weight its input channels (dimension 1) in ", pw[1],
                            "; they must agree"));
    }
    if (has_bias && c > 1) {
      refuse(
          "with a bias the input channels cannot be split: every rank's partial sum would add "
          "the whole bias; split the output channels, or convolve without a bias and add it after");
    }
    const int an = axis_for(f, n), ac = axis_for(f, c), ao = axis_for(f, o);
    f.input_maps = {{an, ac, kNotSplit, kNotSplit}, {ao, ac, kNotSplit, kNotSplit}};
    f.output_maps = {{an, ao, kNotSplit, kNotSplit}};
    f.output_partial = {ac == kNotSplit ? Map{} : Map{ac}};
    if (has_bias) f.input_maps.push_back({ao});
    if (c > 1) {
      f.communication = detail::concat(
          "the input channels are split in ", c,
          ": each rank's convolution is a partial sum over its channels, reduced over those ", c,
          " ranks");
    }
  } else {
    // A rank's output channels come from the groups of its input channels: both split alike,
    // in whole groups, and each rank convolves groups / parts of them.
    if (pw[1] != 1) {
      refuse(detail::concat(
          "with ", a.groups,
          " groups the weight's dimension 1 (the input channels within a group) stays whole"));
    }
    if (c != o) {
      refuse(detail::concat("with ", a.groups,
                            " groups the input channels (x dimension 1) and the output channels "
                            "(weight dimension 0) split alike, got ",
                            c, " and ", o, " parts"));
    }
    if (a.groups % c != 0) {
      refuse(detail::concat("the channel split must keep groups whole on each rank: ", c,
                            " parts do not divide the ", a.groups, " groups"));
    }
    local.groups = a.groups / c;
    const int an = axis_for(f, n), ac = axis_for(f, c);
    f.input_maps = {{an, ac, kNotSplit, kNotSplit}, {ac, kNotSplit, kNotSplit, kNotSplit}};
    f.output_maps = {{an, ac, kNotSplit, kNotSplit}};
    f.output_partial = {{}};
    if (has_bias) f.input_maps.push_back({ac});
  }
  f.local_attrs = local;
  return f;
}

std::optional<Strategy> conv_follow(std::span<const TensorMeta> in, const Attrs& attrs, int index,
                                    const Parts& parts) {
  const ConvAttrs& a = attrs.as<ConvAttrs>();
  const bool has_bias = in.size() > 2;
  if ((index == 0 || index == 1 || index < 0) && parts.size() != 4) return std::nullopt;
  int64_t n = 1, c = 1, o = 1;
  if (index == 0) {
    n = parts[0];
    c = parts[1];
  } else if (index == 1) {
    o = parts[0];
    c = parts[1];
  } else if (index == 2) {
    o = parts[0];
  } else {
    n = parts[0];
    o = parts[1];
  }
  Strategy s;
  if (a.groups > 1) {
    int64_t p = index == 0 ? c : o;
    if (a.groups % p != 0) p = 1;
    s = {{n, p, 1, 1}, {p, 1, 1, 1}};
    if (has_bias) s.push_back({p});
    return s;
  }
  if (has_bias) c = 1;
  s = {{n, c, 1, 1}, {o, c, 1, 1}};
  if (has_bias) s.push_back({o});
  return s;
}

// ---- max_pool2d / avg_pool2d (x [N, C, H, W]): windows within one channel of one sample ----

ShardedForm pool_form(std::span<const TensorMeta>, const Attrs& attrs, const Strategy& s) {
  if (s[0][2] != 1 || s[0][3] != 1) refuse(kSpatialWhole);
  ShardedForm f;
  const Map m = split_each(f, s[0]);
  f.input_maps = {m};
  f.output_maps = {m};
  f.output_partial = {{}};
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> pool_follow(std::span<const TensorMeta>, const Attrs&, int,
                                    const Parts& parts) {
  if (parts.size() != 4) return std::nullopt;
  return Strategy{{parts[0], parts[1], 1, 1}};
}

// ---- batch_norm(x [N, C, ...], gamma, beta, running_mean, running_var [C]) ----
//   -> y like x, saved_mean [C], saved_inv_std [C]

constexpr char kBatchStatistics[] =
    "in training only the channels (dimension 1) can be split: the batch statistics cover every "
    "sample and position of a channel, and a rank holding part of the batch or of the image "
    "would normalize with its own part's statistics (a sharded op does not reduce them across "
    "ranks, as SyncBatchNorm does under DATA_PARALLEL)";

ShardedForm batch_norm_form(std::span<const TensorMeta>, const Attrs& attrs, const Strategy& s) {
  const BatchNormAttrs& a = attrs.as<BatchNormAttrs>();
  const Parts& px = s[0];
  const int64_t c = px[1];
  for (size_t i = 1; i < 5; ++i) {
    if (s[i][0] != c) {
      refuse(detail::concat(
          "gamma, beta, running_mean and running_var split like the channels (x dimension 1, ", c,
          " parts); input ", i, " splits in ", s[i][0]));
    }
  }
  if (a.training) {
    for (size_t d = 0; d < px.size(); ++d) {
      if (d != 1 && px[d] != 1) refuse(kBatchStatistics);
    }
  }
  ShardedForm f;
  const Map x = split_each(f, px);
  const Map channel{x[1]};
  f.input_maps = {x, channel, channel, channel, channel};
  f.output_maps = {x, channel, channel};
  f.output_partial = {{}, {}, {}};
  f.local_attrs = attrs;
  return f;
}

std::optional<Strategy> batch_norm_follow(std::span<const TensorMeta> in, const Attrs& attrs,
                                          int index, const Parts& parts) {
  const size_t rank = size_t(in[0].shape.rank());
  Parts x(rank, 1);
  if (index <= 0) {
    if (parts.size() != rank) return std::nullopt;
    if (!attrs.as<BatchNormAttrs>().training) x = parts;
    x[1] = parts[1];
  } else {
    x[1] = parts[0];
  }
  const Parts channel{x[1]};
  return Strategy{x, channel, channel, channel, channel};
}

}  // namespace

const ShardRule kConv2dShardRule = {
    .accepts =
        "((n, c, 1, 1), (o, c, 1, 1), (o,)): the batch n, the input channels c (partial sums; "
        "not with a bias) and the output channels o, together or alone; with groups > 1, "
        "((n, p, 1, 1), (p, 1, 1, 1), (p,)) where p divides the groups; height and width whole",
    .form = conv_form,
    .follow = conv_follow,
};
const ShardRule kPool2dShardRule = {
    .accepts = "((n, c, 1, 1),): the batch and the channels; height and width whole",
    .form = pool_form,
    .follow = pool_follow,
};
const ShardRule kBatchNormShardRule = {
    .accepts =
        "((1, c, 1, 1), (c,), (c,), (c,), (c,)) in training: the channels, each rank normalizing "
        "its own with their own statistics (exact); the batch and spatial dimensions whole, since "
        "a sharded op does not reduce statistics across ranks (SyncBatchNorm does, under "
        "DATA_PARALLEL); in evaluation (running statistics) any split, the vectors split like the "
        "channels",
    .form = batch_norm_form,
    .follow = batch_norm_follow,
};

}  // namespace kiln::ops
