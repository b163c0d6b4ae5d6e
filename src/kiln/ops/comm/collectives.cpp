#include "kiln/ops/comm/collectives.h"

#include <cstring>
#include <map>
#include <mutex>

#include "kiln/comm/communicator.h"
#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/kernels/copy.h"

namespace kiln::ops {
namespace {

// The output in logical row-major order, or a staging copy of the input in it.
Tensor dense_input(const Tensor& x) {
  return x.is_contiguous() ? x : contiguous_copy(x);
}

void copy_into(const Tensor& src, Tensor& dst) {
  if (src.raw_data() == dst.raw_data() && src.strides() == dst.strides()) return;
  strided_copy(src, dst);
}

// Per element on the wire: a ring all-reduce sends and receives 2 (n - 1) / n of the buffer.
Cost ring_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out, const Attrs&) {
  const double n = double(comm::size());
  const double bytes = double(out[0].shape.numel()) * double(dtype_size(out[0].dtype));
  return {double(out[0].shape.numel()), bytes * (2.0 + 2.0 * (n - 1) / n)};
}

void check_reducible(const char* op, const TensorMeta& m) {
  if (m.dtype != DType::f32 && m.dtype != DType::i32 && m.dtype != DType::i64) {
    throw ShapeError(std::string(op) + ": reduces f32, i32 or i64 data, got " + describe_meta(m));
  }
}

// ---- all_reduce ----

std::vector<TensorMeta> infer_all_reduce(std::span<const TensorMeta> in, const Attrs& attrs) {
  const AllReduceAttrs& a = attrs.as<AllReduceAttrs>();
  check_reducible("all_reduce", in[0]);
  if (a.reduction != 0 && a.reduction != 1) {
    throw ShapeError(
        detail::concat("all_reduce: reduction must be 0 (mean) or 1 (sum), got ", a.reduction));
  }
  if (a.reduction == 0 && in[0].dtype != DType::f32) {
    throw ShapeError("all_reduce: a mean needs f32 data, got " + describe_meta(in[0]));
  }
  comm::group_size(a.group);  // this rank must be in the group
  return {in[0]};
}

void all_reduce_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const AllReduceAttrs& a = attrs.as<AllReduceAttrs>();
  Tensor& y = out[0];
  Tensor staged = y.is_contiguous() ? y : Tensor::empty(y.shape(), y.dtype());
  copy_into(in[0], staged);
  comm::all_reduce(staged.raw_data(), staged.numel(), staged.dtype(), comm::ReduceOp::sum, a.group);
  const int n = comm::group_size(a.group);
  if (a.reduction == 0 && n > 1) {
    float* p = staged.data<float>();
    const float inv = 1.0f / float(n);
    for (int64_t i = 0; i < staged.numel(); ++i) p[i] *= inv;
  }
  if (!staged.same(y)) strided_copy(staged, y);
}

// ---- broadcast ----

std::vector<TensorMeta> infer_broadcast(std::span<const TensorMeta> in, const Attrs& attrs) {
  const BroadcastAttrs& a = attrs.as<BroadcastAttrs>();
  if (a.root < 0 || a.root >= comm::size()) {
    throw ShapeError(detail::concat("broadcast: root rank ", a.root, " is outside a job of ",
                                    comm::size(), " ranks, for ", describe_meta(in[0])));
  }
  if (in[0].dtype == DType::f16 || in[0].dtype == DType::bf16) {
    throw ShapeError("broadcast: f32, integer or bool data, got " + describe_meta(in[0]));
  }
  return {in[0]};
}

void broadcast_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const BroadcastAttrs& a = attrs.as<BroadcastAttrs>();
  Tensor& y = out[0];
  Tensor staged = y.is_contiguous() ? y : Tensor::empty(y.shape(), y.dtype());
  copy_into(in[0], staged);
  comm::broadcast(staged.raw_data(), staged.numel(), staged.dtype(), int(a.root));
  if (!staged.same(y)) strided_copy(staged, y);
}

// ---- all_gather / reduce_scatter ----

int64_t collective_axis(const char* op, const TensorMeta& m, int64_t axis) {
  const int64_t r = m.shape.rank();
  const int64_t a = axis < 0 ? axis + r : axis;
  if (r == 0 || a < 0 || a >= r) {
    throw ShapeError(detail::concat(op, ": axis ", axis, " is outside ", describe_meta(m)));
  }
  return a;
}

std::vector<TensorMeta> infer_all_gather(std::span<const TensorMeta> in, const Attrs& attrs) {
  const CollectiveAttrs& a = attrs.as<CollectiveAttrs>();
  const int64_t axis = collective_axis("all_gather", in[0], a.axis);
  if (in[0].dtype == DType::f16 || in[0].dtype == DType::bf16) {
    throw ShapeError("all_gather: f32, integer or bool data, got " + describe_meta(in[0]));
  }
  std::vector<int64_t> dims = in[0].shape.dims();
  dims[size_t(axis)] *= comm::group_size(a.group);
  return {TensorMeta{Shape(std::move(dims)), in[0].dtype}};
}

// Block j of `whole` along `axis`: `block`'s shape, at the block's place in `whole`.
Tensor block_view(const Tensor& whole, const Shape& block, int64_t axis, int64_t j) {
  return whole.view_as(block, whole.strides(),
                       whole.offset() + j * block[int(axis)] * whole.strides()[size_t(axis)]);
}

void all_gather_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const CollectiveAttrs& a = attrs.as<CollectiveAttrs>();
  const int64_t axis = collective_axis("all_gather", meta_of(in[0]), a.axis);
  Tensor x = dense_input(in[0]);
  Tensor& y = out[0];
  if (axis == 0 && y.is_contiguous()) {
    comm::all_gather(x.raw_data(), y.raw_data(), x.numel(), x.dtype(), a.group);
    return;
  }
  const int n = comm::group_size(a.group);
  Tensor staged = Tensor::empty(Shape({int64_t(n) * x.numel()}), x.dtype());
  comm::all_gather(x.raw_data(), staged.raw_data(), x.numel(), x.dtype(), a.group);
  for (int j = 0; j < n; ++j) {
    Tensor src = staged.view_as(x.shape(), contiguous_strides(x.shape()), int64_t(j) * x.numel());
    Tensor dst = block_view(y, x.shape(), axis, j);
    strided_copy(src, dst);
  }
}

std::vector<TensorMeta> infer_reduce_scatter(std::span<const TensorMeta> in, const Attrs& attrs) {
  const CollectiveAttrs& a = attrs.as<CollectiveAttrs>();
  check_reducible("reduce_scatter", in[0]);
  const int64_t axis = collective_axis("reduce_scatter", in[0], a.axis);
  const int64_t n = comm::group_size(a.group);
  if (in[0].shape[int(axis)] % n != 0) {
    throw ShapeError(detail::concat("reduce_scatter: dimension ", axis, " of ",
                                    describe_meta(in[0]), " must be a multiple of the ", n,
                                    " ranks"));
  }
  std::vector<int64_t> dims = in[0].shape.dims();
  dims[size_t(axis)] /= n;
  return {TensorMeta{Shape(std::move(dims)), in[0].dtype}};
}

void reduce_scatter_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const CollectiveAttrs& a = attrs.as<CollectiveAttrs>();
  const int64_t axis = collective_axis("reduce_scatter", meta_of(in[0]), a.axis);
  Tensor x = dense_input(in[0]);
  Tensor& y = out[0];
  Tensor packed = x;
  if (axis != 0) {
    // Each rank's block made contiguous, blocks in rank order, as MPI scatters them.
    const int n = comm::group_size(a.group);
    const Shape& block = y.shape();
    packed = Tensor::empty(x.shape(), x.dtype());
    for (int j = 0; j < n; ++j) {
      Tensor dst = packed.view_as(block, contiguous_strides(block), int64_t(j) * block.numel());
      strided_copy(block_view(x, block, axis, j), dst);
    }
  }
  Tensor staged = y.is_contiguous() ? y : Tensor::empty(y.shape(), y.dtype());
  comm::reduce_scatter(packed.raw_data(), staged.raw_data(), staged.numel(), x.dtype(),
                       comm::ReduceOp::sum, a.group);
  if (!staged.same(y)) strided_copy(staged, y);
}

// ---- all_to_all ----

std::vector<TensorMeta> infer_all_to_all(std::span<const TensorMeta> in, const Attrs& attrs) {
  const AllToAllAttrs& a = attrs.as<AllToAllAttrs>();
  const int64_t split = collective_axis("all_to_all", in[0], a.split_axis);
  const int64_t concat = collective_axis("all_to_all", in[0], a.concat_axis);
  if (in[0].dtype == DType::f16 || in[0].dtype == DType::bf16) {
    throw ShapeError("all_to_all: f32, integer or bool data, got " + describe_meta(in[0]));
  }
  const int64_t n = comm::group_size(a.group);
  if (in[0].shape[int(split)] % n != 0) {
    throw ShapeError(detail::concat("all_to_all: dimension ", split, " of ", describe_meta(in[0]),
                                    " must be a multiple of the ", n, " ranks"));
  }
  std::vector<int64_t> dims = in[0].shape.dims();
  dims[size_t(split)] /= n;
  dims[size_t(concat)] *= n;
  return {TensorMeta{Shape(std::move(dims)), in[0].dtype}};
}

void all_to_all_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const AllToAllAttrs& a = attrs.as<AllToAllAttrs>();
  const int64_t split = collective_axis("all_to_all", meta_of(in[0]), a.split_axis);
  const int64_t concat = collective_axis("all_to_all", meta_of(in[0]), a.concat_axis);
  const Tensor x = dense_input(in[0]);
  Tensor& y = out[0];
  const int n = comm::group_size(a.group);
  // The block for each rank made contiguous, blocks in rank order, as MPI sends them.
  std::vector<int64_t> block_dims = x.shape().dims();
  block_dims[size_t(split)] /= n;
  const Shape block(block_dims);
  Tensor packed = Tensor::empty(x.shape(), x.dtype());
  for (int j = 0; j < n; ++j) {
    Tensor dst = packed.view_as(block, contiguous_strides(block), int64_t(j) * block.numel());
    strided_copy(block_view(x, block, split, j), dst);
  }
  Tensor received = Tensor::empty(x.shape(), x.dtype());
  comm::all_to_all(packed.raw_data(), received.raw_data(), block.numel(), x.dtype(), a.group);
  // Rank i's block is block i of the output along concat_axis.
  std::vector<int64_t> piece_dims = y.shape().dims();
  piece_dims[size_t(concat)] /= n;
  const Shape piece(piece_dims);
  for (int i = 0; i < n; ++i) {
    Tensor src = received.view_as(piece, contiguous_strides(piece), int64_t(i) * piece.numel());
    Tensor dst = block_view(y, piece, concat, i);
    strided_copy(src, dst);
  }
}

// ---- barrier ----

std::vector<TensorMeta> infer_barrier(std::span<const TensorMeta>, const Attrs&) {
  return {TensorMeta{Shape({}), DType::i32}};
}

void barrier_kernel(std::span<const Tensor>, std::span<Tensor> out, const Attrs&) {
  comm::barrier();
  *out[0].data<int32_t>() = comm::size();
}

Cost no_cost(std::span<const TensorMeta>, std::span<const TensorMeta>, const Attrs&) {
  return {};
}

// ---- gradient buckets ----

// The reductions in flight, by the address of their bucket (the start's output).
struct InFlight {
  std::mutex mutex;
  std::map<const void*, comm::Work> work;
};
InFlight& in_flight() {
  static InFlight f;
  return f;
}

std::vector<TensorMeta> infer_bucket_start(std::span<const TensorMeta> in, const Attrs&) {
  if (in.empty()) throw ShapeError("all_reduce_bucket_start: needs at least one gradient");
  int64_t total = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype != DType::f32) {
      throw ShapeError(detail::concat("all_reduce_bucket_start: gradient ", i, " is ",
                                      describe_meta(in[i]),
                                      "; data parallelism reduces f32 gradients"));
    }
    total += in[i].shape.numel();
  }
  return {TensorMeta{Shape({total}), DType::f32}};
}

void bucket_start_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const BucketAttrs& a = attrs.as<BucketAttrs>();
  Tensor& flat = out[0];
  float* base = flat.data<float>();
  int64_t at = 0;
  for (const Tensor& g : in) {
    Tensor window = flat.view_as(g.shape(), contiguous_strides(g.shape()), flat.offset() + at);
    copy_into(g, window);
    at += g.numel();
  }
  if (a.prescale != 1.0) {
    const float s = float(a.prescale);
    for (int64_t i = 0; i < at; ++i) base[i] *= s;
  }
  comm::Work work = comm::all_reduce_async(base, at, DType::f32);
  if (!work.pending()) return;
  InFlight& f = in_flight();
  std::lock_guard<std::mutex> lock(f.mutex);
  f.work[base] = std::move(work);
}

std::vector<TensorMeta> infer_bucket_wait(std::span<const TensorMeta> in, const Attrs&) {
  if (in[0].dtype != DType::f32 || in[0].shape.rank() != 1) {
    throw ShapeError(
        "all_reduce_bucket_wait: expects the f32 vector of all_reduce_bucket_start, "
        "got " +
        describe_meta(in[0]));
  }
  return {in[0]};
}

void bucket_wait_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  comm::Work work;
  {
    InFlight& f = in_flight();
    std::lock_guard<std::mutex> lock(f.mutex);
    auto it = f.work.find(in[0].raw_data());
    if (it != f.work.end()) {
      work = std::move(it->second);
      f.work.erase(it);
    }
  }
  work.wait();
  if (in[0].raw_data() != out[0].raw_data()) {
    std::memcpy(out[0].raw_data(), in[0].raw_data(), size_t(in[0].nbytes()));
  }
}

}  // namespace

// Why no collective has a shard rule of its own.
constexpr const char* kCommunicationIsNotSharded =
    "communication itself: the partition inserts it, it is not partitioned";

const OpDef op_def_all_reduce = {
    .name = "all_reduce",
    .attrs = attrs_kind<AllReduceAttrs>,
    .infer = infer_all_reduce,
    .kernel = all_reduce_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const AllReduceAttrs& a = c.attrs.as<AllReduceAttrs>();
      return {all_reduce(c.grad_outputs[0], CollectiveReduction(a.reduction), a.group)};
    },
    .f16_kernels = false,
    .cost = ring_cost,
    .no_shard_reason = kCommunicationIsNotSharded,
};

const OpDef op_def_broadcast = {
    .name = "broadcast",
    .attrs = attrs_kind<BroadcastAttrs>,
    .infer = infer_broadcast,
    .kernel = broadcast_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Tensor sum = all_reduce(c.grad_outputs[0], CollectiveReduction::sum);
      return {comm::rank() == c.attrs.as<BroadcastAttrs>().root ? sum : mul_scalar(sum, 0.0)};
    },
    .f16_kernels = false,
    .cost = ring_cost,
    .no_shard_reason = kCommunicationIsNotSharded,
};

const OpDef op_def_all_gather = {
    .name = "all_gather",
    .attrs = attrs_kind<CollectiveAttrs>,
    .infer = infer_all_gather,
    .kernel = all_gather_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const CollectiveAttrs& a = c.attrs.as<CollectiveAttrs>();
      return {reduce_scatter(c.grad_outputs[0], a.axis, a.group)};
    },
    .f16_kernels = false,
    .cost = ring_cost,
    .no_shard_reason = kCommunicationIsNotSharded,
};

const OpDef op_def_reduce_scatter = {
    .name = "reduce_scatter",
    .attrs = attrs_kind<CollectiveAttrs>,
    .infer = infer_reduce_scatter,
    .kernel = reduce_scatter_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const CollectiveAttrs& a = c.attrs.as<CollectiveAttrs>();
      return {all_gather(c.grad_outputs[0], a.axis, a.group)};
    },
    .f16_kernels = false,
    .cost = ring_cost,
    .no_shard_reason = kCommunicationIsNotSharded,
};

const OpDef op_def_all_to_all = {
    .name = "all_to_all",
    .attrs = attrs_kind<AllToAllAttrs>,
    .infer = infer_all_to_all,
    .kernel = all_to_all_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const AllToAllAttrs& a = c.attrs.as<AllToAllAttrs>();
      return {all_to_all(c.grad_outputs[0], a.concat_axis, a.split_axis, a.group)};
    },
    .f16_kernels = false,
    .cost = ring_cost,
    .no_shard_reason = kCommunicationIsNotSharded,
};

const OpDef op_def_barrier = {
    .name = "barrier",
    .num_inputs = 0,
    .infer = infer_barrier,
    .kernel = barrier_kernel,
    .no_grad_reason = "takes no input",
    .cost = no_cost,
    .no_shard_reason = kCommunicationIsNotSharded,
};

const OpDef op_def_all_reduce_bucket_start = {
    .name = "all_reduce_bucket_start",
    .attrs = attrs_kind<BucketAttrs>,
    .num_inputs = -1,
    .infer = infer_bucket_start,
    .kernel = bucket_start_kernel,
    .no_grad_reason = "data parallelism inserts it after differentiation, on gradients",
    .f16_kernels = false,
    .cost = ring_cost,
    .no_shard_reason = kCommunicationIsNotSharded,
};

const OpDef op_def_all_reduce_bucket_wait = {
    .name = "all_reduce_bucket_wait",
    .infer = infer_bucket_wait,
    .kernel = bucket_wait_kernel,
    .no_grad_reason = "data parallelism inserts it after differentiation, on gradients",
    .f16_kernels = false,
    .cost = no_cost,
    .no_shard_reason = kCommunicationIsNotSharded,
};

Tensor all_reduce(const Tensor& x, CollectiveReduction reduction,
                  const std::vector<int64_t>& group) {
  Attrs a = AllReduceAttrs{.reduction = int64_t(reduction), .group = group};
  return call_one_output(OpKind::all_reduce, {x}, a);
}

Tensor broadcast(const Tensor& x, int root) {
  Attrs a = BroadcastAttrs{.root = root};
  return call_one_output(OpKind::broadcast, {x}, a);
}

Tensor all_gather(const Tensor& x, int64_t axis, const std::vector<int64_t>& group) {
  Attrs a = CollectiveAttrs{.axis = axis, .group = group};
  return call_one_output(OpKind::all_gather, {x}, a);
}

Tensor reduce_scatter(const Tensor& x, int64_t axis, const std::vector<int64_t>& group) {
  Attrs a = CollectiveAttrs{.axis = axis, .group = group};
  return call_one_output(OpKind::reduce_scatter, {x}, a);
}

Tensor all_to_all(const Tensor& x, int64_t split_axis, int64_t concat_axis,
                  const std::vector<int64_t>& group) {
  Attrs a = AllToAllAttrs{.split_axis = split_axis, .concat_axis = concat_axis, .group = group};
  return call_one_output(OpKind::all_to_all, {x}, a);
}

Tensor barrier() {
  return std::move(call(OpKind::barrier, std::span<const Tensor>())[0]);
}

Tensor all_reduce_bucket_start(const std::vector<Tensor>& grads, double prescale) {
  Attrs a = BucketAttrs{.prescale = prescale};
  return std::move(call(OpKind::all_reduce_bucket_start, std::span<const Tensor>(grads), a)[0]);
}

Tensor all_reduce_bucket_wait(const Tensor& bucket) {
  return call_one_output(OpKind::all_reduce_bucket_wait, {bucket});
}

}  // namespace kiln::ops
