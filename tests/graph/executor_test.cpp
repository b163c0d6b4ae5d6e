#include "kiln/graph/executor.h"

#include "graph_test_util.h"
#include "kiln/core/random.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::executor_test {
namespace {
using namespace testing;

// Runs `steps` SGD steps eagerly and compiled on copies of the same parameters and checks the
// losses and final parameters agree.
void expect_eager_graph_agree(const LossFn& f, const std::vector<Tensor>& init, const Tensor& x,
                              const Tensor& labels, const CompileOptions& opt, int steps = 4) {
  std::vector<Tensor> pe = clone_all(init), pg = clone_all(init);
  Tensor lr_e = Tensor::scalar(0.1), lr_g = Tensor::scalar(0.1);
  Executable exe(trace_step(f, pg, x, labels, lr_g), opt);
  for (int s = 0; s < steps; ++s) {
    float le = eager_step(f, pe, x, labels, lr_e);
    std::vector<Tensor> out = exe.run(std::vector<Tensor>{x, labels});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_NEAR(out[0].item<float>(), le, 1e-5 + 1e-5 * std::abs(le)) << "step " << s;
  }
  expect_all_close(pg, pe, 1e-5, 1e-4, "parameters");
}

TEST(Executor, MlpMatchesEagerWithoutPasses) {
  CompileOptions opt{.optimize = false, .fusion = false, .inplace = false};
  expect_eager_graph_agree(mlp_loss, mlp_params(12, 16, 5, 1), random_tensor({8, 12}, 7),
                           random_labels(8, 5, 3), opt);
}

TEST(Executor, MlpMatchesEagerWithPassesAndInplace) {
  CompileOptions opt{.optimize = true, .fusion = false, .inplace = true};
  expect_eager_graph_agree(mlp_loss, mlp_params(12, 16, 5, 1), random_tensor({8, 12}, 7),
                           random_labels(8, 5, 3), opt);
}

TEST(Executor, MlpMatchesEagerWithFusion) {
  CompileOptions opt{.optimize = true, .fusion = true, .inplace = true};
  expect_eager_graph_agree(mlp_loss, mlp_params(12, 16, 5, 1), random_tensor({8, 12}, 7),
                           random_labels(8, 5, 3), opt);
}

TEST(Executor, UpdatesRealParametersInPlace) {
  std::vector<Tensor> p = mlp_params(6, 4, 3, 11);
  Tensor before = p[0].clone();
  Tensor lr = Tensor::scalar(0.5);
  Tensor x = random_tensor({4, 6}, 2);
  Tensor y = random_labels(4, 3, 5);
  Executable exe(trace_step(mlp_loss, p, x, y, lr), {});
  exe.run(std::vector<Tensor>{x, y});
  // The same tensors the caller holds changed: parameters are bound by reference.
  std::vector<float> a = before.to_vector<float>(), b = p[0].to_vector<float>();
  bool changed = false;
  for (size_t i = 0; i < a.size(); ++i) changed = changed || a[i] != b[i];
  EXPECT_TRUE(changed);
  // And the lr tensor is read every step, not folded: lr 0 leaves parameters alone.
  *static_cast<float*>(lr.raw_data()) = 0.0f;
  Tensor snapshot = p[0].clone();
  exe.run(std::vector<Tensor>{x, y});
  expect_all_close({p[0]}, {snapshot}, 0, 0, "parameters with lr 0");
}

// Dropout draws a fresh mask every step, from the same generator stream eager mode uses.
TEST(Executor, DropoutMaskIsFreshEveryStepAndMatchesEager) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::dropout(in[0], 0.5, true)[0]};
  };
  Tensor x = random_tensor({4096}, 1, 0.5f, 1.5f);
  Compiled c = compile_and_run(fn, {x}, {.fusion = true});
  set_seed(123);
  std::vector<Tensor> graph_out;
  for (int s = 0; s < 3; ++s) graph_out.push_back(c.exe->run(std::vector<Tensor>{x})[0]);
  set_seed(123);
  std::vector<Tensor> eager_out;
  for (int s = 0; s < 3; ++s) eager_out.push_back(fn({x})[0]);
  expect_all_close(graph_out, eager_out, 0, 0, "masks");
  std::vector<float> a = graph_out[0].to_vector<float>(), b = graph_out[1].to_vector<float>();
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  EXPECT_GT(differ, 1000);  // about half the elements switch between two masks
}

TEST(Executor, RejectsInputsOfAnotherShape) {
  std::vector<Tensor> p = mlp_params(6, 4, 3, 11);
  Tensor lr = Tensor::scalar(0.1);
  Tensor x = random_tensor({4, 6}, 2);
  Tensor y = random_labels(4, 3, 5);
  Executable exe(trace_step(mlp_loss, p, x, y, lr), {});
  Tensor x2 = random_tensor({3, 6}, 2);
  EXPECT_FALSE(exe.accepts(std::vector<Tensor>{x2, y}));
  EXPECT_THROW(exe.run(std::vector<Tensor>{x2, random_labels(3, 3, 5)}), ShapeError);
}

TEST(Executor, PlanIsSmallerThanSeparateAllocations) {
  std::vector<Tensor> p = mlp_params(32, 64, 10, 3);
  Tensor lr = Tensor::scalar(0.1);
  Tensor x = random_tensor({16, 32}, 2);
  Tensor y = random_labels(16, 10, 5);
  Executable exe(trace_step(mlp_loss, p, x, y, lr), {});
  const CompileReport& r = exe.report();
  EXPECT_GT(r.arena_bytes, 0);
  EXPECT_GE(r.arena_bytes, r.live_bytes_peak);
  EXPECT_LT(r.arena_bytes, r.unplanned_bytes);
  check_memory_plan(exe.plan());
}

// updates_last (loss scaling): the step runs in two parts. Nothing before the first update
// writes a parameter, so skipping run_updates() leaves them bit-identical; running it gives
// exactly what one run() gives. Without updates_last the updates are interleaved with backward.
TEST(Executor, UpdatesLastSplitsTheStepBeforeTheFirstUpdate) {
  Tensor x = random_tensor({8, 12}, 7), y = random_labels(8, 5, 3);
  for (bool fusion : {false, true}) {
    std::vector<Tensor> init = mlp_params(12, 16, 5, 1);
    std::vector<Tensor> pa = clone_all(init), pb = clone_all(init);
    Tensor lr = Tensor::scalar(0.1);
    Executable whole(trace_step(mlp_loss, pa, x, y, lr), {.fusion = fusion});
    Executable split(trace_step(mlp_loss, pb, x, y, lr), {.fusion = fusion, .updates_last = true});
    const std::vector<NodeId>& order = split.plan().schedule;
    bool seen_update = false;
    for (NodeId n : order) {
      bool update = passes::is_optimizer_update(split.graph().node(n));
      EXPECT_FALSE(seen_update && !update) << "a non-update runs after an update";
      seen_update = seen_update || update;
    }
    EXPECT_TRUE(seen_update);
    check_memory_plan(split.plan());
    for (int s = 0; s < 3; ++s) {
      std::vector<Tensor> before = clone_all(pb);
      std::vector<Tensor> skipped = split.run_until_updates(std::vector<Tensor>{x, y});
      expect_all_close(pb, before, 0, 0, "parameters after run_until_updates");
      std::vector<Tensor> expected = whole.run(std::vector<Tensor>{x, y});
      std::vector<Tensor> out = split.run_until_updates(std::vector<Tensor>{x, y});
      EXPECT_EQ(out[0].item<float>(), skipped[0].item<float>());
      EXPECT_NEAR(out[0].item<float>(), expected[0].item<float>(), 1e-6);
      split.run_updates();
      expect_all_close(pb, pa, 1e-6, 1e-5, "parameters after run_updates");
    }
    EXPECT_THROW(split.run_updates(), Error);  // each run_updates needs its own first half
    EXPECT_THROW(whole.run_until_updates(std::vector<Tensor>{x, y}), Error);
  }
}

}  // namespace
}  // namespace kiln::graph::executor_test
