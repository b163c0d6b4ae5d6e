#pragma once
// Data parallelism (ParallelMode::DATA_PARALLEL): every rank holds the whole model, trains on
// its shard of each batch, and the ranks' gradients are all-reduced before the update.
//
// Gradients go in buckets, in backward order (the parameters' order reversed: the last layer's
// gradients exist first), each about AutoParallelContext::bucket_cap_mb (the first one smaller,
// so communication starts early). A bucket's all-reduce starts as soon as its last gradient
// exists and runs on the communicator's thread while the backward goes on:
//  - eager: GradientReducer, fed by autograd::grad's gradient-ready callback, into buffers kept
//    across steps (OpenMPI's large all-reduces are several times slower on fresh buffers);
//  - graph: trace_gradient_all_reduce adds the all_reduce_bucket_start/_wait ops to the step;
//    the schedule_collectives pass moves each start right after the node that produces its last
//    gradient, and each bucket's updates run as soon as its wait returns.
// gradients_mean is folded into the copy into the bucket (a multiplication by 1/ranks).
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/comm/communicator.h"
#include "kiln/core/parallel_context.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/cell.h"

namespace kiln::parallel {

// DATA_PARALLEL is set and the job has more than one rank.
bool data_parallel_active();
// What each rank's gradients are multiplied by before the sum: 1/ranks with gradients_mean.
double gradient_prescale();

struct Bucket {
  std::vector<size_t> params;  // indices into the parameter list, in backward order
  int64_t numel = 0;
};
// Buckets in backward order: parameters taken last to first, a new bucket when the next one
// would pass the cap (the first bucket's cap is first_cap_mb). Every parameter is in one bucket.
std::vector<Bucket> assign_buckets(const std::vector<Tensor>& params, double cap_mb,
                                   double first_cap_mb);
std::vector<Bucket> assign_buckets(const std::vector<Tensor>& params);  // the context's caps

// Rank 0's values of `tensors` copied to every rank (the parameters at the start of training).
void broadcast_from_rank0(const std::vector<Tensor>& tensors);
void broadcast_from_rank0(const std::vector<nn::NamedTensor>& tensors);

// One thing every rank must agree on: its name for the message and a value (a size, or a hash
// of a description). check_agreement throws the same Error on every rank when some rank's value
// differs from rank 0's, naming the item and each rank's value.
struct AgreementItem {
  std::string name;
  int64_t value = 0;
  std::string shown;  // what the message prints for this rank's value (default: the number)
};
void check_agreement(const std::vector<AgreementItem>& items);
// A stable 63-bit hash of a description (FNV-1a), for AgreementItem::value.
int64_t describe_hash(const std::string& description);
// A stable 63-bit hash of the tensors' values (for a loaded checkpoint's agreement).
int64_t hash_tensor_bytes(const std::vector<nn::NamedTensor>& tensors);
// The model's structure as every rank must see it: each parameter's name, shape and dtype.
std::string describe_parameters(const std::vector<nn::NamedTensor>& params);

// Eager data parallelism's bucketed all-reduce. ready() takes each gradient as the backward
// produces it; a bucket is reduced as soon as it is complete and every earlier bucket has
// started (all ranks start them in the same order). finish() waits for every bucket and
// returns the reduced gradients (views into the reducer's buffers, valid until the next step).
class GradientReducer {
 public:
  explicit GradientReducer(const std::vector<Tensor>& params);
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void ready(size_t param, const Tensor& grad);
  std::vector<Tensor> finish();
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void start_ready_buckets();

  std::vector<Shape> shapes_;
  std::vector<Bucket> buckets_;
  std::vector<Tensor> flat_;       // per bucket, kept across steps
  std::vector<int64_t> offset_;    // per parameter: where it lies in its bucket
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<size_t> missing_;    // per bucket: gradients not yet copied in
  std::vector<comm::Work> work_;   // per bucket
  std::vector<bool> got_;          // per parameter, this step
  size_t next_start_ = 0;          // buckets start in order
  float prescale_ = 1.0f;
};

// Graph mode: the traced gradients after their bucketed all-reduce over every rank (same order
// and shapes), each multiplied by `prescale` (gradient_prescale() by default).
std::vector<Tensor> trace_gradient_all_reduce(const std::vector<Tensor>& grads);
std::vector<Tensor> trace_gradient_all_reduce(const std::vector<Tensor>& grads, double prescale);

}  // namespace kiln::parallel
