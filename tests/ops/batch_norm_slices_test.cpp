// batch_norm and batch_norm_grad on batch slices whose statistics are combined
// (BatchNormAttrs::batch_slices): each slice, run on its own thread of a ThreadGroup, must
// compute what the whole-batch op computes for its rows, in every layout the op takes; the
// running statistics are updated once; and outside a group the op says why it cannot run.
// Across ranks (sync_ranks) the same kernels gather through the communicator instead: under
// mpirun in tests/parallel/mpi/data_parallel_test.cpp (SyncBatchNorm), alone here.
#include <gtest/gtest.h>

#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/kernel_threads.h"
#include "kiln/core/thread_group.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"
#include "nn_reference.h"

namespace kiln::testing::batch_norm_slices_test {
namespace {

enum class Layout { nchw, channels_last, rows_2d };

struct Case {
  Layout layout;
  DType dtype;
  int slices;
  std::string name() const {
    const char* names[] = {"nchw", "channels_last", "2d"};
    return std::string(names[int(layout)]) + " " + std::string(dtype_name(dtype)) + " " +
           std::to_string(slices) + " slices";
  }
};

Tensor in_layout(const Tensor& t, const Case& c) {
  const Tensor typed = c.dtype == DType::bf16 ? to_bf16(t) : t;
  return c.layout == Layout::channels_last ? channels_last_copy(typed) : typed;
}

Values values(const Tensor& t) {
  return values_of(t.dtype() == DType::f32 ? t : ops::cast(t, DType::f32));
}

struct Step {
  std::vector<Tensor> y, dx;            // per slice (one: the whole batch)
  Values mean, inv_std, dgamma, dbeta;  // dgamma and dbeta summed over the slices
  Values running_mean, running_var;
};

// One forward and backward of batch_norm in training, as `slices` slices of the batch x (with
// upstream gradient dy), each on its own thread of one ThreadGroup; 1: the whole batch.
Step run(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta, int slices) {
  const int64_t n = x.dim(0) / slices, c = x.dim(1);
  Tensor rm = random_tensor({c}, 40), rv = random_tensor({c}, 41, 0.5f, 1.5f);
  const ops::Attrs attrs =
      ops::BatchNormAttrs{.training = true, .momentum = 0.9, .eps = 1e-5, .batch_slices = slices};
  Step step;
  step.y.resize(static_cast<size_t>(slices));
  step.dx.resize(static_cast<size_t>(slices));
  const size_t count = static_cast<size_t>(slices);
  std::vector<Values> mean(count), inv_std(count), dgamma(count), dbeta(count);
  ThreadGroup group(slices);
  std::vector<std::exception_ptr> errors(count);
  auto slice = [&](int i) {
    try {
      KernelThreads alone(1);
      std::optional<ThreadGroup::Member> member;
      if (slices > 1) member.emplace(group, i);
      const Tensor xs = slices == 1 ? x : ops::slice(x, 0, i * n, (i + 1) * n);
      const Tensor dys = slices == 1 ? dy : ops::slice(dy, 0, i * n, (i + 1) * n);
      const std::vector<Tensor> f =
          ops::call(ops::OpKind::batch_norm, {xs, gamma, beta, rm, rv}, attrs);
      const std::vector<Tensor> b =
          ops::call(ops::OpKind::batch_norm_grad, {dys, xs, gamma, f[1], f[2]}, attrs);
      step.y[size_t(i)] = f[0];
      step.dx[size_t(i)] = b[0];
      mean[size_t(i)] = values_of(f[1]);
      inv_std[size_t(i)] = values_of(f[2]);
      dgamma[size_t(i)] = values_of(b[1]);
      dbeta[size_t(i)] = values_of(b[2]);
    } catch (...) {
      errors[size_t(i)] = std::current_exception();
      group.abort();
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < slices; ++i) threads.emplace_back(slice, i);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  for (int i = 1; i < slices;
       ++i) {  // every slice normalizes with the same statistics, bit for bit
    EXPECT_EQ(mean[size_t(i)], mean[0]) << "slice " << i;
    EXPECT_EQ(inv_std[size_t(i)], inv_std[0]) << "slice " << i;
  }
  step.mean = mean[0];
  step.inv_std = inv_std[0];
  step.dgamma.assign(size_t(c), 0.0);
  step.dbeta.assign(size_t(c), 0.0);
  for (int i = 0; i < slices; ++i) {
    for (int64_t k = 0; k < c; ++k) {
      step.dgamma[size_t(k)] += dgamma[size_t(i)][size_t(k)];
      step.dbeta[size_t(k)] += dbeta[size_t(i)][size_t(k)];
    }
  }
  step.running_mean = values_of(rm);
  step.running_var = values_of(rv);
  return step;
}

TEST(BatchNormSlices, EachSliceComputesWhatTheWholeBatchComputesForItsRows) {
  const std::vector<Case> cases = {{Layout::channels_last, DType::f32, 2},
                                   {Layout::channels_last, DType::f32, 4},
                                   {Layout::nchw, DType::f32, 2},
                                   {Layout::rows_2d, DType::f32, 3},
                                   {Layout::channels_last, DType::bf16, 2}};
  for (const Case& c : cases) {
    const Shape shape = c.layout == Layout::rows_2d ? Shape{24, 7} : Shape{8, 5, 3, 4};
    // An offset mean, so that combining the slices' variances is put to the test.
    const Tensor x = in_layout(random_tensor(shape, 1, 2.0f, 5.0f), c);
    const Tensor dy = in_layout(random_tensor(shape, 2), c);
    const Tensor gamma = random_tensor({shape[1]}, 3, 0.5f, 1.5f);
    const Tensor beta = random_tensor({shape[1]}, 4);
    const Step whole = run(x, dy, gamma, beta, 1);
    const Step split = run(x, dy, gamma, beta, c.slices);
    // bf16 outputs round once; the statistics and f32 outputs differ by summation order alone.
    const double tol = c.dtype == DType::bf16 ? 1e-2 : 1e-5;
    const int64_t n = shape[0] / c.slices;
    for (int i = 0; i < c.slices; ++i) {
      const std::string what = c.name() + ", slice " + std::to_string(i);
      expect_close(values(split.y[size_t(i)]),
                   values(ops::slice(whole.y[0], 0, i * n, (i + 1) * n)), tol, tol, what + " y");
      expect_close(values(split.dx[size_t(i)]),
                   values(ops::slice(whole.dx[0], 0, i * n, (i + 1) * n)), tol, tol, what + " dx");
      EXPECT_EQ(split.y[size_t(i)].strides(), ops::slice(x, 0, i * n, (i + 1) * n).strides())
          << what << ": y in x's layout";
    }
    expect_close(split.mean, whole.mean, 1e-6, 1e-6, c.name() + " mean");
    expect_close(split.inv_std, whole.inv_std, 1e-6, 1e-6, c.name() + " inv_std");
    expect_close(split.dgamma, whole.dgamma, 1e-5, 1e-5, c.name() + " dgamma");
    expect_close(split.dbeta, whole.dbeta, 1e-5, 1e-5, c.name() + " dbeta");
    // Updated once, with the whole batch's unbiased variance.
    expect_close(split.running_mean, whole.running_mean, 1e-6, 1e-6, c.name() + " running_mean");
    expect_close(split.running_var, whole.running_var, 1e-6, 1e-6, c.name() + " running_var");
  }
}

TEST(BatchNormSlices, OutsideAGroupTheOpSaysWhyItCannotRun) {
  const Tensor x = random_tensor({4, 3}, 5), gamma = random_tensor({3}, 6);
  const Tensor beta = random_tensor({3}, 7), rm = random_tensor({3}, 8);
  const Tensor rv = random_tensor({3}, 9, 0.5f, 1.5f);
  const ops::Attrs attrs = ops::BatchNormAttrs{.training = true, .eps = 1e-5, .batch_slices = 2};
  expect_error_mentions(
      [&] {
        ops::call(ops::OpKind::batch_norm, {x, gamma, beta, rm, rv}, attrs);
      },
      {"batch_norm", "2 slices", "outside a group"});
  ThreadGroup three(3);
  ThreadGroup::Member member(three, 0);
  expect_error_mentions(
      [&] {
        ops::call(ops::OpKind::batch_norm, {x, gamma, beta, rm, rv}, attrs);
      },
      {"batch_norm", "2 slices", "a group of 3"});
  // In eval the running statistics are used: nothing to combine, so it runs anywhere.
  const ops::Attrs eval = ops::BatchNormAttrs{.eps = 1e-5, .batch_slices = 2};
  EXPECT_NO_THROW(ops::call(ops::OpKind::batch_norm, {x, gamma, beta, rm, rv}, eval));
  // A data-parallel rank runs its batch whole: slices and ranks at once is a mistake.
  const ops::Attrs both =
      ops::BatchNormAttrs{.training = true, .eps = 1e-5, .batch_slices = 2, .sync_ranks = true};
  expect_error_mentions(
      [&] {
        ops::call(ops::OpKind::batch_norm, {x, gamma, beta, rm, rv}, both);
      },
      {"batch_norm", "batch_slices", "sync_ranks"});
}

// Statistics across ranks in a process that is the whole job: its own batch is the batch.
TEST(BatchNormSlices, AcrossRanksAloneIsThePlainOp) {
  const Tensor x = random_tensor({6, 3}, 10), gamma = random_tensor({3}, 11);
  const Tensor beta = random_tensor({3}, 12);
  const Tensor rv = random_tensor({3}, 14, 0.5f, 1.5f);
  Tensor rm_plain = random_tensor({3}, 13), rv_plain = rv.clone();
  Tensor rm_sync = rm_plain.clone(), rv_sync = rv.clone();
  const std::vector<Tensor> plain =
      ops::batch_norm(x, gamma, beta, rm_plain, rv_plain, true, 0.9, 1e-5);
  const std::vector<Tensor> sync =
      ops::batch_norm(x, gamma, beta, rm_sync, rv_sync, true, 0.9, 1e-5, true);
  expect_close(values(sync[0]), values(plain[0]), 0, 0, "y");
  expect_close(values(rm_sync), values(rm_plain), 0, 0, "running_mean");
  expect_close(values(rv_sync), values(rv_plain), 0, 0, "running_var");
}

}  // namespace
}  // namespace kiln::testing::batch_norm_slices_test
