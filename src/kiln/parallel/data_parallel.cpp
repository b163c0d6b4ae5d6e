#include "kiln/parallel/data_parallel.h"

#include <cstring>

#include "kiln/core/error.h"
#include "kiln/ops/comm/collectives.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/kernels/copy.h"

namespace kiln::parallel {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

void check_f32(const Tensor& t, size_t i) {
  if (t.dtype() != DType::f32) {
    throw Error(detail::concat("data parallel: parameter ", i, " is ", describe(t),
                               "; gradients are reduced in f32 (keep master weights in f32)"));
  }
}

}  // namespace

bool data_parallel_active() {
  return get_auto_parallel_context().parallel_mode == ParallelMode::DATA_PARALLEL &&
         comm::size() > 1;
}

double gradient_prescale() {
  return get_auto_parallel_context().gradients_mean ? 1.0 / comm::size() : 1.0;
}

std::vector<Bucket> assign_buckets(const std::vector<Tensor>& params, double cap_mb,
                                   double first_cap_mb) {
  std::vector<Bucket> buckets;
  int64_t bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const int64_t b = int64_t(params[k].nbytes());
    const double cap = (buckets.size() <= 1 ? first_cap_mb : cap_mb) * kMiB;
    if (buckets.empty() || (!buckets.back().params.empty() && double(bytes + b) > cap)) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().params.push_back(k);
    buckets.back().numel += params[k].numel();
    bytes += b;
  }
  return buckets;
}

std::vector<Bucket> assign_buckets(const std::vector<Tensor>& params) {
  const AutoParallelContext& c = get_auto_parallel_context();
  return assign_buckets(params, c.bucket_cap_mb, c.first_bucket_cap_mb);
}

void broadcast_from_rank0(const std::vector<Tensor>& tensors) {
  if (comm::size() == 1) return;
  for (const Tensor& t : tensors) {
    t.mark_written();
    if (t.is_contiguous()) {
      comm::broadcast(t.raw_data(), t.numel(), t.dtype(), 0);
      continue;
    }
    Tensor staged = ops::contiguous_copy(t);
    comm::broadcast(staged.raw_data(), staged.numel(), staged.dtype(), 0);
    Tensor target = t;
    ops::strided_copy(staged, target);
  }
}

void broadcast_from_rank0(const std::vector<nn::NamedTensor>& tensors) {
  std::vector<Tensor> plain;
  for (const auto& [name, t] : tensors) plain.push_back(t);
  broadcast_from_rank0(plain);
}

namespace {

// FNV-1a over `n` bytes, continuing from `h`.
uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
constexpr uint64_t kFnvBasis = 1469598103934665603ull;

}  // namespace

int64_t describe_hash(const std::string& description) {
  return int64_t(fnv1a(kFnvBasis, description.data(), description.size()) >> 1);
}

int64_t hash_tensor_bytes(const std::vector<nn::NamedTensor>& tensors) {
  uint64_t h = kFnvBasis;
  for (const auto& [name, t] : tensors) {
    const Tensor dense = t.is_contiguous() ? t : ops::contiguous_copy(t);
    h = fnv1a(h, dense.raw_data(), dense.nbytes());
  }
  return int64_t(h >> 1);
}

std::string describe_parameters(const std::vector<nn::NamedTensor>& params) {
  std::string s;
  for (const auto& [name, t] : params) {
    s += name + ":" + std::string(dtype_name(t.dtype())) + t.shape().str() + ";";
  }
  return s;
}

void check_agreement(const std::vector<AgreementItem>& items) {
  const int n = comm::size();
  if (n == 1 || items.empty()) return;
  std::vector<int64_t> mine;
  for (const AgreementItem& item : items) mine.push_back(item.value);
  std::vector<int64_t> all(mine.size() * size_t(n));
  comm::all_gather(mine.data(), all.data(), int64_t(mine.size()), DType::i64);
  // The shown strings are short: gather them too, fixed width, for the message.
  constexpr size_t kWidth = 48;
  std::vector<uint8_t> text(items.size() * kWidth, 0);
  for (size_t i = 0; i < items.size(); ++i) {
    std::string shown = items[i].shown.empty() ? std::to_string(items[i].value) : items[i].shown;
    std::memcpy(text.data() + i * kWidth, shown.data(), std::min(shown.size(), kWidth - 1));
  }
  std::vector<uint8_t> all_text(text.size() * size_t(n));
  comm::all_gather(text.data(), all_text.data(), int64_t(text.size()), DType::u8);
  std::string problems;
  for (size_t i = 0; i < items.size(); ++i) {
    bool differ = false;
    for (int r = 1; r < n; ++r) differ = differ || all[size_t(r) * items.size() + i] != all[i];
    if (!differ) continue;
    problems += "\n  " + items[i].name + ":";
    for (int r = 0; r < n; ++r) {
      const char* shown =
          reinterpret_cast<const char*>(all_text.data() + (size_t(r) * items.size() + i) * kWidth);
      problems += detail::concat(" rank ", r, " has ", shown, r + 1 < n ? ";" : "");
    }
  }
  if (!problems.empty()) {
    throw comm::CollectiveError(
        "data parallel: the ranks disagree on what they train (every rank must run the "
        "same model, optimizer and per-rank batch size):" +
        problems);
  }
}

GradientReducer::GradientReducer(const std::vector<Tensor>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    check_f32(params[i], i);
    shapes_.push_back(params[i].shape());
  }
  buckets_ = assign_buckets(params);
  offset_.resize(params.size());
  bucket_of_.resize(params.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t at = 0;
    for (size_t p : buckets_[b].params) {
      offset_[p] = at;
      bucket_of_[p] = b;
      at += params[p].numel();
    }
    flat_.push_back(Tensor::zeros(Shape({buckets_[b].numel}), DType::f32));
  }
  work_.resize(buckets_.size());
  missing_.resize(buckets_.size());
  got_.assign(params.size(), false);
  prescale_ = float(gradient_prescale());
  for (size_t b = 0; b < buckets_.size(); ++b) missing_[b] = buckets_[b].params.size();
}

void GradientReducer::ready(size_t param, const Tensor& grad) {
  if (param >= shapes_.size() || got_[param]) return;
  if (grad.shape() != shapes_[param] || grad.dtype() != DType::f32) {
    throw Error(detail::concat("data parallel: the gradient of parameter ", param, " is ",
                               describe(grad), ", expected f32", shapes_[param].str()));
  }
  got_[param] = true;
  const size_t b = bucket_of_[param];
  Tensor window = flat_[b].view_as(shapes_[param], contiguous_strides(shapes_[param]),
                                   flat_[b].offset() + offset_[param]);
  ops::strided_copy(grad, window);
  if (prescale_ != 1.0f) {
    float* p = window.data<float>();
    for (int64_t i = 0; i < window.numel(); ++i) p[i] *= prescale_;
  }
  if (--missing_[b] == 0) start_ready_buckets();
}

void GradientReducer::start_ready_buckets() {
  while (next_start_ < buckets_.size() && missing_[next_start_] == 0) {
    Tensor& flat = flat_[next_start_];
    work_[next_start_] = comm::all_reduce_async(flat.raw_data(), flat.numel(), DType::f32);
    ++next_start_;
  }
}

std::vector<Tensor> GradientReducer::finish() {
  for (size_t p = 0; p < got_.size(); ++p) {
    if (!got_[p]) throw Error(detail::concat("data parallel: parameter ", p, " got no gradient"));
  }
  start_ready_buckets();
  std::vector<Tensor> grads(shapes_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    work_[b].wait();
    for (size_t p : buckets_[b].params) {
      grads[p] = flat_[b].view_as(shapes_[p], contiguous_strides(shapes_[p]),
                                  flat_[b].offset() + offset_[p]);
    }
    missing_[b] = buckets_[b].params.size();
  }
  got_.assign(got_.size(), false);
  next_start_ = 0;
  return grads;
}

std::vector<Tensor> trace_gradient_all_reduce(const std::vector<Tensor>& grads) {
  return trace_gradient_all_reduce(grads, gradient_prescale());
}

std::vector<Tensor> trace_gradient_all_reduce(const std::vector<Tensor>& grads, double prescale) {
  const std::vector<Bucket> buckets = assign_buckets(grads);
  std::vector<Tensor> started;
  for (const Bucket& bucket : buckets) {
    std::vector<Tensor> members;
    for (size_t p : bucket.params) {
      check_f32(grads[p], p);
      members.push_back(grads[p]);
    }
    started.push_back(ops::all_reduce_bucket_start(members, prescale));
  }
  std::vector<Tensor> reduced(grads.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    const Tensor flat = ops::all_reduce_bucket_wait(started[b]);
    int64_t at = 0;
    for (size_t p : buckets[b].params) {
      const int64_t n = grads[p].numel();
      reduced[p] = ops::reshape(ops::slice(flat, 0, at, at + n), grads[p].shape());
      at += n;
    }
  }
  return reduced;
}

}  // namespace kiln::parallel
