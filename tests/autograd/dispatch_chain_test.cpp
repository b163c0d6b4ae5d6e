// The dispatch chain (ops/dispatch_chain.h): a slot runs only once installed, installing is
// idempotent and safe from several threads, and per-thread state stays per thread.
#include "kiln/ops/dispatch_chain.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "kiln/autograd/tape.h"
#include "kiln/core/error.h"
#include "kiln/ops/functional.h"
#include "testing/leaf_tensor.h"

namespace kiln::dispatch_chain_test {
namespace {

using testing::leaf;

// Empties the tape's slot for one test and puts the tape back after it.
struct WithoutTape {
  WithoutTape() { ops::dispatch_chain().set_tape(nullptr); }
  ~WithoutTape() { autograd::install_tape(); }
};

TEST(DispatchChain, WithoutTheTapeNothingIsRecordedAndBackwardSaysWhatToInstall) {
  WithoutTape without;
  EXPECT_FALSE(autograd::tape_installed());
  Tensor x = leaf({1, 2}, {2});
  Tensor y = ops::sum(ops::mul(x, x));
  EXPECT_FALSE(y.requires_grad());
  try {
    autograd::backward(y);
    FAIL() << "backward without the tape must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("autograd::install_tape()"), std::string::npos)
        << e.what();
  }
}

TEST(DispatchChain, InstallingTheTapeTwiceRecordsOnce) {
  autograd::install_tape();
  autograd::install_tape();
  EXPECT_TRUE(autograd::tape_installed());
  Tensor x = leaf({3}, {1});
  std::vector<Tensor> g = autograd::grad(ops::sum(ops::mul(x, x)), {x});
  EXPECT_FLOAT_EQ(g[0].item<float>(), 6.0f);
}

std::atomic<int> g_kernels_seen{0};
std::atomic<int> g_adds_seen{0};

void count_kernel(ops::OpKind kind, std::span<const Tensor>, std::span<const Tensor>,
                  const ops::Attrs&, int64_t begin_ns, int64_t end_ns) {
  ++g_kernels_seen;
  if (kind == ops::OpKind::add && end_ns >= begin_ns) ++g_adds_seen;
}

TEST(DispatchChain, TheKernelObserverSeesEachEagerKernelUntilRemoved) {
  g_kernels_seen = 0;
  g_adds_seen = 0;
  ops::dispatch_chain().set_kernel_observer(count_kernel);
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  ops::add(a, a);
  ops::mul(a, a);
  ops::dispatch_chain().set_kernel_observer(nullptr);
  ops::add(a, a);
  EXPECT_EQ(g_kernels_seen.load(), 2);
  EXPECT_EQ(g_adds_seen.load(), 1);
}

TEST(DispatchChain, ThreadsInstallAndDifferentiateAtOnceWithTheirOwnGradMode) {
  constexpr int kThreads = 4;
  std::vector<float> grads(kThreads, 0.f);
  std::vector<bool> recorded_without_grad(kThreads, true);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([i, &grads, &recorded_without_grad] {
      autograd::install_tape();
      Tensor x = leaf({float(i + 1)}, {1});
      {
        NoGradGuard no_grad;  // this thread's grad mode only
        recorded_without_grad[size_t(i)] = ops::mul(x, x).requires_grad();
      }
      grads[size_t(i)] = autograd::grad(ops::sum(ops::mul(x, x)), {x})[0].item<float>();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_FLOAT_EQ(grads[size_t(i)], 2.0f * float(i + 1)) << "thread " << i;
    EXPECT_FALSE(recorded_without_grad[size_t(i)]) << "thread " << i;
  }
  EXPECT_TRUE(ops::grad_enabled());
}

}  // namespace
}  // namespace kiln::dispatch_chain_test
