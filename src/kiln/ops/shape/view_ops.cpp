// Shape ops that view their input's memory where the layout allows: reshape, transpose, slice,
// contiguous. A reshape or contiguous of a tensor whose layout does not allow a view copies.
#include <numeric>

#include "kiln/ops/detail/slice_spec.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/kernels/copy.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {

std::string dims_str(const std::vector<int64_t>& v) {
  return Shape(v).str();
}

Cost view_cost(std::span<const TensorMeta>, std::span<const TensorMeta>, const Attrs&) {
  return {0, 0};
}

Cost input_copy_cost(std::span<const TensorMeta> in, std::span<const TensorMeta>, const Attrs&) {
  return {0, 2.0 * double(in[0].shape.numel()) * double(dtype_size(in[0].dtype))};
}

// ---- reshape ----

Shape resolve_reshape(const TensorMeta& in, const std::vector<int64_t>& target) {
  int64_t known = 1;
  int wildcard = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1 && wildcard < 0) {
      wildcard = int(i);
    } else if (target[i] < 0) {
      throw ShapeError("reshape: invalid target shape " + dims_str(target) + " for " +
                       describe_meta(in) + " (only one -1 allowed, no other negative sizes)");
    } else {
      known *= target[i];
    }
  }
  std::vector<int64_t> dims = target;
  const int64_t n = in.shape.numel();
  if (wildcard >= 0) {
    if (known == 0 || n % known != 0) {
      throw ShapeError("reshape: cannot reshape " + describe_meta(in) + " to " + dims_str(target));
    }
    dims[size_t(wildcard)] = n / known;
  } else if (known != n) {
    throw ShapeError("reshape: cannot reshape " + describe_meta(in) + " (" + std::to_string(n) +
                     " elements) to " + dims_str(target));
  }
  return Shape(std::move(dims));
}

std::vector<TensorMeta> infer_reshape(std::span<const TensorMeta> in, const Attrs& a) {
  return {TensorMeta{resolve_reshape(in[0], a.as<ShapeAttrs>().shape), in[0].dtype}};
}

Tensor reshape_view(const Tensor& x, const Attrs& a) {
  Shape shape = resolve_reshape(meta_of(x), a.as<ShapeAttrs>().shape);
  Tensor base = contiguous_copy(x);
  return base.view_as(shape, contiguous_strides(shape), base.offset());
}

// ---- transpose ----

std::vector<int64_t> checked_perm(const TensorMeta& in, const std::vector<int64_t>& perm) {
  const int rank = in.shape.rank();
  std::vector<int64_t> p = perm;
  std::vector<bool> seen(size_t(rank), false);
  bool ok = int(p.size()) == rank;
  for (size_t i = 0; ok && i < p.size(); ++i) {
    if (p[i] < 0) p[i] += rank;
    ok = p[i] >= 0 && p[i] < rank && !seen[size_t(p[i])];
    if (ok) seen[size_t(p[i])] = true;
  }
  if (!ok) {
    throw ShapeError("transpose: " + dims_str(perm) + " is not a permutation of the dims of " +
                     describe_meta(in));
  }
  return p;
}

std::vector<TensorMeta> infer_transpose(std::span<const TensorMeta> in, const Attrs& a) {
  std::vector<int64_t> p = checked_perm(in[0], a.as<PermuteAttrs>().perm);
  const Shape& s = in[0].shape;
  Strides in_strides =
      in[0].layout == Layout::channels_last ? channels_last_strides(s) : contiguous_strides(s);
  std::vector<int64_t> dims;
  Strides strides;
  for (int64_t d : p) {
    dims.push_back(s[int(d)]);
    strides.push_back(in_strides[size_t(d)]);
  }
  Shape out(std::move(dims));
  // Permuting NHWC memory to NCHW dims is a channels-last tensor: say so, so that consumers
  // keep that layout instead of converting.
  Layout layout =
      out.rank() == 4 && strides == channels_last_strides(out) && strides != contiguous_strides(out)
          ? Layout::channels_last
          : Layout::contiguous;
  return {TensorMeta{out, in[0].dtype, layout}};
}

Tensor transpose_view(const Tensor& x, const Attrs& a) {
  std::vector<int64_t> p = checked_perm(meta_of(x), a.as<PermuteAttrs>().perm);
  std::vector<int64_t> dims;
  Strides strides;
  for (int64_t d : p) {
    dims.push_back(x.shape()[int(d)]);
    strides.push_back(x.strides()[size_t(d)]);
  }
  return x.view_as(Shape(std::move(dims)), strides, x.offset());
}

// ---- slice ----

std::vector<TensorMeta> infer_slice(std::span<const TensorMeta> in, const Attrs& a) {
  shape::SliceSpec s = shape::slice_spec("slice", in[0], a.as<SliceAttrs>());
  Shape out = in[0].shape;
  out[s.axis] = s.length;
  return {TensorMeta{out, in[0].dtype}};
}

Tensor slice_view(const Tensor& x, const Attrs& a) {
  shape::SliceSpec s = shape::slice_spec("slice", meta_of(x), a.as<SliceAttrs>());
  Shape shape = x.shape();
  shape[s.axis] = s.length;
  Strides strides = x.strides();
  const int64_t offset = x.offset() + s.start * strides[size_t(s.axis)];
  strides[size_t(s.axis)] *= s.step;
  return x.view_as(shape, strides, offset);
}

// ---- contiguous ----

std::vector<TensorMeta> infer_contiguous(std::span<const TensorMeta> in, const Attrs&) {
  return {TensorMeta{in[0].shape, in[0].dtype}};
}

Tensor contiguous_view(const Tensor& x, const Attrs&) {
  Tensor c = contiguous_copy(x);
  return c.view_as(c.shape(), c.strides(), c.offset());
}

}  // namespace

const OpDef op_def_reshape = {
    .name = "reshape",
    .attrs = attrs_kind<ShapeAttrs>,
    .infer = infer_reshape,
    .view = reshape_view,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {reshape(c.grad_outputs[0], c.input_metas[0].shape)};
    },
    .cost = view_cost,
    .shard = &kReshapeShardRule,
};

const OpDef op_def_transpose = {
    .name = "transpose",
    .attrs = attrs_kind<PermuteAttrs>,
    .infer = infer_transpose,
    .view = transpose_view,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      std::vector<int64_t> p = checked_perm(c.input_metas[0], c.attrs.as<PermuteAttrs>().perm);
      std::vector<int64_t> inverse(p.size());
      for (size_t i = 0; i < p.size(); ++i) inverse[size_t(p[i])] = int64_t(i);
      return {transpose(c.grad_outputs[0], inverse)};
    },
    .cost = view_cost,
    .shard = &kTransposeShardRule,
};

const OpDef op_def_slice = {
    .name = "slice",
    .attrs = attrs_kind<SliceAttrs>,
    .infer = infer_slice,
    .view = slice_view,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const SliceAttrs& a = c.attrs.as<SliceAttrs>();
      return {pad_slice_grad(c.grad_outputs[0], c.input_metas[0].shape, a.axis, a.start, a.end,
                             a.step)};
    },
    .cost = view_cost,
    .shard = &kSliceShardRule,
};

const OpDef op_def_contiguous = {
    .name = "contiguous",
    .infer = infer_contiguous,
    .view = contiguous_view,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> { return {c.grad_outputs[0]}; },
    .cost = input_copy_cost,
    .shard = &kElementwiseShardRule,
};

Tensor reshape(const Tensor& x, const Shape& shape) {
  Attrs a = ShapeAttrs{.shape = shape.dims()};
  return call_one_output(OpKind::reshape, {x}, a);
}

Tensor flatten(const Tensor& x) {
  if (x.rank() == 0)
    throw ShapeError("flatten: expects at least one dimension, got " + describe(x));
  int64_t rest = 1;
  for (int i = 1; i < x.rank(); ++i) rest *= x.shape()[i];
  return reshape(x, Shape{x.shape()[0], rest});
}

Tensor transpose(const Tensor& x, std::vector<int64_t> perm) {
  Attrs a = PermuteAttrs{.perm = std::move(perm)};
  return call_one_output(OpKind::transpose, {x}, a);
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  const int rank = x.rank();
  const int64_t d0 = dim0 < 0 ? dim0 + rank : dim0, d1 = dim1 < 0 ? dim1 + rank : dim1;
  if (d0 < 0 || d0 >= rank || d1 < 0 || d1 >= rank) {
    throw ShapeError(detail::concat("transpose: dims (", dim0, ", ", dim1,
                                    ") are out of range for ", describe(x)));
  }
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  std::swap(perm[size_t(d0)], perm[size_t(d1)]);
  return transpose(x, std::move(perm));
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  Attrs a = SliceAttrs{.axis = axis, .start = start, .end = end, .step = step};
  return call_one_output(OpKind::slice, {x}, a);
}

Tensor contiguous(const Tensor& x) {
  return call_one_output(OpKind::contiguous, {x});
}

}  // namespace kiln::ops
