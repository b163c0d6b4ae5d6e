#pragma once
// Op attributes: one plain aggregate per op family, and `Attrs`, the variant every op entry point
// takes. Each family lists its fields once, in KILN_ATTRS_FIELDS; hashing, equality and printing
// are generated from that list, and a static_assert below makes a field left out of it a compile
// error. OpDef::attrs names the family an op reads; ops::call and the graph check it.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::ops {

// Declares a family's fields, once: `fields()` ties them (const and mutable) and `field_names`
// spells them, for printing.
#define KILN_ATTRS_FIELDS(...)    \
  auto fields() const {           \
    return std::tie(__VA_ARGS__); \
  }                               \
  auto fields() {                 \
    return std::tie(__VA_ARGS__); \
  }                               \
  static constexpr std::string_view field_names = #__VA_ARGS__

// Ops without attributes: elementwise (but the *_scalar ones), contiguous, embedding, the
// gradient helpers, barrier, bucket waits.
struct NoAttrs {
  KILN_ATTRS_FIELDS();
  bool operator==(const NoAttrs&) const = default;
};

// add_scalar / mul_scalar operand, pow_scalar exponent, causal_mask's fill value.
struct ScalarAttrs {
  double scalar = 0.0;
  KILN_ATTRS_FIELDS(scalar);
  bool operator==(const ScalarAttrs&) const = default;
};

// sum, mean, max, argmax. Empty `axes` reduces over all dimensions (argmax takes one).
struct ReduceAttrs {
  std::vector<int64_t> axes;
  bool keepdims = false;
  KILN_ATTRS_FIELDS(axes, keepdims);
  bool operator==(const ReduceAttrs&) const = default;
};

// reshape / broadcast_to / sum_to_shape: the target shape.
struct ShapeAttrs {
  std::vector<int64_t> shape;
  KILN_ATTRS_FIELDS(shape);
  bool operator==(const ShapeAttrs&) const = default;
};

// transpose: the permutation.
struct PermuteAttrs {
  std::vector<int64_t> perm;
  KILN_ATTRS_FIELDS(perm);
  bool operator==(const PermuteAttrs&) const = default;
};

// concat, softmax, log_softmax and their gradients: one axis (negative counts from the end).
struct AxisAttrs {
  int64_t axis = -1;
  KILN_ATTRS_FIELDS(axis);
  bool operator==(const AxisAttrs&) const = default;
};

// slice and its gradient pad_slice_grad, whose output shape is `shape` (empty for slice).
struct SliceAttrs {
  int64_t axis = 0;
  int64_t start = 0, end = 0, step = 1;
  std::vector<int64_t> shape;
  KILN_ATTRS_FIELDS(axis, start, end, step, shape);
  bool operator==(const SliceAttrs&) const = default;
};

// cast: the target dtype.
struct CastAttrs {
  DType dtype = DType::f32;
  KILN_ATTRS_FIELDS(dtype);
  bool operator==(const CastAttrs&) const = default;
};

struct OneHotAttrs {
  int64_t num_classes = 0;
  DType dtype = DType::f32;
  KILN_ATTRS_FIELDS(num_classes, dtype);
  bool operator==(const OneHotAttrs&) const = default;
};

struct MatmulAttrs {
  bool transpose_a = false, transpose_b = false;
  KILN_ATTRS_FIELDS(transpose_a, transpose_b);
  bool operator==(const MatmulAttrs&) const = default;
};

// Bit i of a layout field: input i is in oneDNN's blocked nChw16c layout instead of the
// channels-last one its strides describe; bit kNchw16cOutputBit + j: output j is. Graph mode only
// (graph/passes/block_layout.cpp); eager mode never sets it.
constexpr int kNchw16cOutputBit = 16;
inline bool input_is_nchw16c(uint32_t bits, int i) {
  return (bits >> i) & 1u;
}
inline bool output_is_nchw16c(uint32_t bits, int j) {
  return (bits >> (kNchw16cOutputBit + j)) & 1u;
}

// conv2d, conv2d_backward_data (shape: the input's), conv2d_backward_weights (shape: the
// weight's; bias_grad: also output the bias gradient).
struct ConvAttrs {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  std::vector<int64_t> shape;
  bool bias_grad = false;
  uint32_t nchw16c = 0;  // activations in the blocked layout (see kNchw16cOutputBit)
  KILN_ATTRS_FIELDS(stride, padding, dilation, groups, shape, bias_grad, nchw16c);
  bool operator==(const ConvAttrs&) const = default;
};

// max/avg_pool2d and their gradients (avg_pool2d_grad: shape is the input's).
struct PoolAttrs {
  std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0};
  std::vector<int64_t> shape;
  KILN_ATTRS_FIELDS(kernel, stride, padding, shape);
  bool operator==(const PoolAttrs&) const = default;
};

// batch_norm, batch_norm_grad.
struct BatchNormAttrs {
  bool training = false;
  double momentum = 0.0, eps = 1e-8;
  uint32_t nchw16c = 0;  // x and y in the blocked layout (any bit set)
  // In training, the batch is this many equal slices run side by side on the threads of one
  // ThreadGroup (train/batch_split_step.h), x being one slice: the statistics (and in the
  // backward the gradient's sums) are combined across the slices, so every slice normalizes
  // with the whole batch's, and only slice 0 updates the running statistics. 1: x is the batch.
  int64_t batch_slices = 1;
  // In training, x is this rank's shard of a data-parallel batch, and the statistics (and the
  // gradient's sums) are combined across the job's ranks: nn::SyncBatchNorm.
  bool sync_ranks = false;
  KILN_ATTRS_FIELDS(training, momentum, eps, nchw16c, batch_slices, sync_ranks);
  bool operator==(const BatchNormAttrs&) const = default;
};

// layer_norm, layer_norm_grad.
struct LayerNormAttrs {
  double eps = 1e-8;
  KILN_ATTRS_FIELDS(eps);
  bool operator==(const LayerNormAttrs&) const = default;
};

struct DropoutAttrs {
  double p = 0.0;
  int64_t seed = 0;
  bool training = false;
  KILN_ATTRS_FIELDS(p, seed, training);
  bool operator==(const DropoutAttrs&) const = default;
};

// softmax_cross_entropy(_grad). reduction: 0 mean, 1 sum, 2 none.
struct CrossEntropyAttrs {
  int64_t reduction = 0;
  KILN_ATTRS_FIELDS(reduction);
  bool operator==(const CrossEntropyAttrs&) const = default;
};

// embedding_grad: the table's row count.
struct EmbeddingGradAttrs {
  int64_t num_rows = 0;
  KILN_ATTRS_FIELDS(num_rows);
  bool operator==(const EmbeddingGradAttrs&) const = default;
};

struct SgdAttrs {
  double weight_decay = 0.0;
  KILN_ATTRS_FIELDS(weight_decay);
  bool operator==(const SgdAttrs&) const = default;
};

struct MomentumAttrs {
  double momentum = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  KILN_ATTRS_FIELDS(momentum, weight_decay, nesterov);
  bool operator==(const MomentumAttrs&) const = default;
};

// weight_decay is L2 (added to the gradient); decoupled_weight_decay (AdamW) scales the
// parameter by 1 - lr * decoupled_weight_decay first.
struct AdamAttrs {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double decoupled_weight_decay = 0.0;
  KILN_ATTRS_FIELDS(beta1, beta2, eps, weight_decay, decoupled_weight_decay);
  bool operator==(const AdamAttrs&) const = default;
};

// Graph mode's fused_update node (passes/fuse_matmul_momentum.cpp): a matmul accumulated into
// momentum_update's velocity.
struct MatmulMomentumAttrs {
  bool transpose_a = false, transpose_b = false;
  double momentum = 0.0, weight_decay = 0.0;
  KILN_ATTRS_FIELDS(transpose_a, transpose_b, momentum, weight_decay);
  bool operator==(const MatmulMomentumAttrs&) const = default;
};

// all_reduce. reduction: 0 mean, 1 sum (CollectiveReduction). group: the ranks that reduce
// together, ascending (each rank runs the op with its own group); empty: every rank.
struct AllReduceAttrs {
  int64_t reduction = 0;
  std::vector<int64_t> group;
  KILN_ATTRS_FIELDS(reduction, group);
  bool operator==(const AllReduceAttrs&) const = default;
};

// all_gather / reduce_scatter: the dimension the ranks' blocks are concatenated along (or split
// along), and the ranks taking part, ascending, blocks in that order (empty: every rank).
struct CollectiveAttrs {
  int64_t axis = 0;
  std::vector<int64_t> group;
  KILN_ATTRS_FIELDS(axis, group);
  bool operator==(const CollectiveAttrs&) const = default;
};

// all_to_all: each rank splits its tensor along split_axis into one block per rank of the group
// and sends block j to the group's j-th rank; the blocks received are concatenated along
// concat_axis in the group's order (ascending; empty: every rank).
struct AllToAllAttrs {
  int64_t split_axis = 0, concat_axis = 0;
  std::vector<int64_t> group;
  KILN_ATTRS_FIELDS(split_axis, concat_axis, group);
  bool operator==(const AllToAllAttrs&) const = default;
};

// broadcast: the rank whose tensor everyone gets.
struct BroadcastAttrs {
  int64_t root = 0;
  KILN_ATTRS_FIELDS(root);
  bool operator==(const BroadcastAttrs&) const = default;
};

// all_reduce_bucket_start: every gradient is multiplied by prescale on the way in.
struct BucketAttrs {
  double prescale = 0.0;
  KILN_ATTRS_FIELDS(prescale);
  bool operator==(const BucketAttrs&) const = default;
};

// The layout bits of a family that has them (ConvAttrs, BatchNormAttrs).
// clang-format off
template <class T>
  requires requires(const T& t) { t.nchw16c; }
bool input_is_nchw16c(const T& a, int i) {
  return input_is_nchw16c(a.nchw16c, i);
}
template <class T>
  requires requires(const T& t) { t.nchw16c; }
bool output_is_nchw16c(const T& a, int j) {
  return output_is_nchw16c(a.nchw16c, j);
}

// Every family, in variant order.
#define KILN_FOR_EACH_ATTRS(X)                                                                   \
  X(NoAttrs) X(ScalarAttrs) X(ReduceAttrs) X(ShapeAttrs) X(PermuteAttrs) X(AxisAttrs)            \
  X(SliceAttrs) X(CastAttrs) X(OneHotAttrs) X(MatmulAttrs) X(ConvAttrs) X(PoolAttrs)             \
  X(BatchNormAttrs) X(LayerNormAttrs) X(DropoutAttrs) X(CrossEntropyAttrs)                       \
  X(EmbeddingGradAttrs) X(SgdAttrs) X(MomentumAttrs) X(AdamAttrs) X(MatmulMomentumAttrs)         \
  X(AllReduceAttrs) X(CollectiveAttrs) X(BroadcastAttrs) X(BucketAttrs)                          \
  X(AllToAllAttrs)
// clang-format on

enum class AttrsKind : uint8_t {
#define KILN_ATTRS_ENUM(T) T,
  KILN_FOR_EACH_ATTRS(KILN_ATTRS_ENUM)
#undef KILN_ATTRS_ENUM
};

std::string_view attrs_kind_name(AttrsKind kind);

namespace attrs_detail {

// Counts an aggregate's members: the most arguments `T{...}` accepts, each argument converting
// to whatever member it initializes.
struct AnyField {
  template <class T>
  operator T() const;
};
template <class T, class... A>
constexpr size_t aggregate_field_count() {
  if constexpr (requires { T{A{}..., AnyField{}}; }) {
    return aggregate_field_count<T, A..., AnyField>();
  } else {
    return sizeof...(A);
  }
}
template <class T>
constexpr size_t listed_field_count() {
  return std::tuple_size_v<decltype(std::declval<const T&>().fields())>;
}

// std::variant of every family, in KILN_FOR_EACH_ATTRS order (AttrsKind's order too).
template <class Dummy, class... Ts>
struct VariantOfRest {
  using type = std::variant<Ts...>;
};
#define KILN_ATTRS_ALTERNATIVE(T) , T
using AttrsVariant = VariantOfRest<void KILN_FOR_EACH_ATTRS(KILN_ATTRS_ALTERNATIVE)>::type;
#undef KILN_ATTRS_ALTERNATIVE

// T's position in AttrsVariant; the variant's size when T is no family.
template <class T, class... Ts>
constexpr size_t index_in(const std::variant<Ts...>*) {
  size_t i = 0;
  ((std::is_same_v<T, Ts> || (++i, false)) || ...);
  return i;
}
template <class T>
constexpr size_t family_index = index_in<T>(static_cast<const AttrsVariant*>(nullptr));

[[noreturn]] void throw_wrong_attrs(AttrsKind expected, AttrsKind actual);

}  // namespace attrs_detail

// A field missing from a family's KILN_ATTRS_FIELDS list (so not hashed, compared or printed)
// fails here.
#define KILN_ATTRS_CHECK_FIELDS(T)                                                                 \
  static_assert(attrs_detail::aggregate_field_count<T>() == attrs_detail::listed_field_count<T>(), \
                #T ": every member must be listed in KILN_ATTRS_FIELDS");                          \
  static_assert(std::is_aggregate_v<T>, #T " must stay a plain aggregate");
KILN_FOR_EACH_ATTRS(KILN_ATTRS_CHECK_FIELDS)
#undef KILN_ATTRS_CHECK_FIELDS

template <class T>
concept AttrsFamily =
    attrs_detail::family_index<T> < std::variant_size_v<attrs_detail::AttrsVariant>;

// The family of T, for OpDef::attrs: `.attrs = attrs_kind<ReduceAttrs>`.
template <AttrsFamily T>
constexpr AttrsKind attrs_kind = AttrsKind(attrs_detail::family_index<T>);

// The attributes of one op call: exactly one family's struct. Implicitly made from any family,
// so call sites read `call(OpKind::sum, {x}, ReduceAttrs{.axes = {1}})`; default: NoAttrs.
class Attrs {
 public:
  Attrs() = default;
  // clang-format off
  template <class T>
    requires AttrsFamily<std::remove_cvref_t<T>>
  Attrs(T&& family) : v_(std::forward<T>(family)) {}  // NOLINT(google-explicit-constructor)
  // clang-format on

  AttrsKind kind() const { return AttrsKind(v_.index()); }
  template <class T>
  bool is() const {
    return std::holds_alternative<T>(v_);
  }
  // The family's struct; throws Error naming both families when the attrs hold another one.
  template <class T>
  const T& as() const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    attrs_detail::throw_wrong_attrs(attrs_kind<T>, kind());
  }
  template <class T>
  T& as() {
    if (T* p = std::get_if<T>(&v_)) return *p;
    attrs_detail::throw_wrong_attrs(attrs_kind<T>, kind());
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), v_);
  }
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), v_);
  }
  // The family's layout field (ConvAttrs / BatchNormAttrs::nchw16c), or null for families
  // without one.
  uint32_t* layout_bits();
  const uint32_t* layout_bits() const { return const_cast<Attrs*>(this)->layout_bits(); }

  bool operator==(const Attrs&) const = default;

 private:
  attrs_detail::AttrsVariant v_;
};

// Hash of the family and every field (generated from KILN_ATTRS_FIELDS).
size_t hash_attrs(const Attrs& a);
// " name=value" for each field that differs from the family's defaults (empty if none); a layout
// field prints as " nChw16c=in[..] out[..]".
std::string attrs_str(const Attrs& a);
// "in[0,1] out[0]": the inputs and outputs a layout field marks blocked.
std::string layout_bits_str(uint32_t bits);

}  // namespace kiln::ops
