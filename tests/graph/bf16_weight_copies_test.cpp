// Mixed precision: weights cast to bf16 keep a copy that their update writes
// (passes/bf16_weight_copies.cpp), and the executor casts a copy afresh whenever its weight was
// written elsewhere (state_writes.cpp). The steps must compute exactly what casting every step
// computes, whatever else writes the weights in between.
#include "graph_test_util.h"

namespace kiln::graph::bf16_weight_copies_test {
namespace {
using namespace testing;

Tensor bf16(const Tensor& t) {
  return ops::cast(t, DType::bf16);
}

// mlp_loss with the products in bf16, as O2 traces them.
Tensor bf16_mlp_loss(const std::vector<Tensor>& p, const Tensor& x, const Tensor& labels) {
  Tensor h = ops::relu(ops::add(ops::matmul(bf16(x), bf16(p[0]), false, true), bf16(p[1])));
  Tensor logits = ops::add(ops::matmul(h, bf16(p[2]), false, true), bf16(p[3]));
  return ops::softmax_cross_entropy(ops::cast(logits, DType::f32), labels);
}

enum class Optimizer { sgd, momentum, adam };

// One compiled training step of bf16_mlp_loss over parameters it owns, with its optimizer state.
// The weight at `borrowed` (if any) lives in memory Kiln does not own (`outside`).
struct Trainer {
  std::vector<Tensor> params, first, second;
  std::shared_ptr<std::vector<float>> outside;
  Tensor lr = Tensor::scalar(0.05), step_size = Tensor::scalar(0.01);
  std::unique_ptr<Executable> exe, fp32;

  Trainer(Optimizer opt, bool copies, const std::vector<Tensor>& initial, int borrowed = -1) {
    for (size_t i = 0; i < initial.size(); ++i) {
      const Tensor& p = initial[i];
      if (int(i) == borrowed) {
        outside = std::make_shared<std::vector<float>>(p.to_vector<float>());
        params.push_back(Tensor::from_blob(outside->data(), p.shape(), DType::f32, outside));
      } else {
        params.push_back(p.clone());
      }
      first.push_back(Tensor::zeros(p.shape()));
      second.push_back(Tensor::zeros(p.shape()));
    }
    Graph g;
    {
      Tracer tracer(g);
      tracer.bind_state(numbered("p", params, numbered("m", first, numbered("v", second))));
      Tensor x = tracer.input({Shape{16, 12}, DType::f32}, "x");
      Tensor labels = tracer.input({Shape{16}, DType::i32}, "labels");
      Tensor loss = bf16_mlp_loss(params, x, labels);
      std::vector<Tensor> grads = gradients(tracer, loss, params);
      for (size_t i = 0; i < params.size(); ++i) {
        switch (opt) {
          case Optimizer::sgd:
            ops::sgd_update(params[i], grads[i], lr, 0.01);
            break;
          case Optimizer::momentum:
            ops::momentum_update(params[i], grads[i], first[i], lr, 0.9, 0.01, false);
            break;
          case Optimizer::adam:
            ops::adam_update(params[i], grads[i], first[i], second[i], step_size, lr, 0.9, 0.999,
                             1e-8, 0.01, true);
            break;
        }
      }
      tracer.add_output(loss);
      tracer.finish();
    }
    exe = std::make_unique<Executable>(
        std::move(g), CompileOptions{.fusion = true, .bf16_weight_copies = copies});
  }

  float step(int seed) {
    Tensor x = random_tensor({16, 12}, uint64_t(100 + seed)), labels = random_labels(16, 5, 7);
    return exe->run(std::vector<Tensor>{x, labels})[0].item<float>();
  }

  // A second compiled step over the same parameters, SGD in fp32 (as the AMP race compiles one).
  void fp32_step() {
    Tensor x = random_tensor({16, 12}, 3), labels = random_labels(16, 5, 7);
    if (!fp32) {
      fp32 = std::make_unique<Executable>(trace_step(mlp_loss, params, x, labels, lr),
                                          CompileOptions{.fusion = true});
    }
    fp32->run(std::vector<Tensor>{x, labels});
  }
};

void expect_same_params(const Trainer& a, const Trainer& b, const std::string& when) {
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_EQ(a.params[i].to_vector<float>(), b.params[i].to_vector<float>())
        << "parameter " << i << " " << when;
  }
}

int weight_casts(const Graph& g) {
  int n = 0;
  for (NodeId id : g.schedule()) {
    const Node& node = g.node(id);
    n += node.type == NodeType::op && node.op == ops::OpKind::cast &&
         g.value(node.inputs[0]).kind == ValueKind::state;
  }
  return n;
}

TEST(Bf16WeightCopies, EveryCastWeightKeepsACopyAndTrainsBitForBitAsCasting) {
  const std::vector<Tensor> initial = mlp_params(12, 32, 5, 7);
  for (Optimizer opt : {Optimizer::sgd, Optimizer::momentum, Optimizer::adam}) {
    SCOPED_TRACE(int(opt));
    Trainer cast(opt, false, initial), kept(opt, true, initial);
    EXPECT_EQ(cast.exe->report().bf16_weight_copies, 0);
    EXPECT_EQ(weight_casts(cast.exe->graph()), 4);
    EXPECT_EQ(kept.exe->report().bf16_weight_copies, 4) << "two weights and two biases";
    EXPECT_EQ(weight_casts(kept.exe->graph()), 0);
    EXPECT_NE(kept.exe->report().str().find("bf16 weight copies 4"), std::string::npos);
    for (int s = 0; s < 4; ++s) EXPECT_EQ(kept.step(s), cast.step(s)) << "step " << s;
    expect_same_params(kept, cast, "after 4 steps");
    EXPECT_EQ(kept.exe->bf16_copy_refreshes(), 4) << "each copy is cast once, on the first step";
  }
}

// Everything that may write a weight between two compiled steps: the copy must follow it.
TEST(Bf16WeightCopies, AWeightWrittenElsewhereIsCastAfresh) {
  const std::vector<Tensor> initial = mlp_params(12, 32, 5, 7);
  Trainer cast(Optimizer::momentum, false, initial), kept(Optimizer::momentum, true, initial);
  int seed = 0;
  auto both = [&](const std::string& what, const std::function<void(Trainer&)>& write) {
    write(cast);
    write(kept);
    EXPECT_EQ(kept.step(seed), cast.step(seed)) << what;
    ++seed;
    expect_same_params(kept, cast, "after " + what);
  };
  both("the first step", [](Trainer&) {});
  both("a second step", [](Trainer&) {});
  const int64_t refreshes = kept.exe->bf16_copy_refreshes();
  EXPECT_EQ(refreshes, 4);
  both("copy_from (a checkpoint load, a state restore)", [&](Trainer& t) {
    t.params[0].copy_from(random_tensor({32, 12}, 42, -0.3f, 0.3f));
  });
  EXPECT_EQ(kept.exe->bf16_copy_refreshes(), refreshes + 1) << "only the weight written";
  both("an eager update", [&](Trainer& t) {
    ops::sgd_update(t.params[2], Tensor::full({5, 32}, 0.5), Tensor::scalar(0.1), 0.0);
  });
  both("a write through data() marked with mark_written", [&](Trainer& t) {
    t.params[1].data<float>()[3] = 0.75f;
    t.params[1].mark_written();
  });
  both("another compiled step", [&](Trainer& t) { t.fp32_step(); });
  EXPECT_EQ(kept.exe->bf16_copy_refreshes(), refreshes + 3 + 4)
      << "copy_from, the eager update and the marked write refresh one copy each; the fp32 "
         "step wrote all four weights";
}

// A weight in memory Kiln does not own (a caller's buffer, as a numpy array is) may change
// unseen: its copy is cast every step, and a write Kiln never hears of is still followed.
TEST(Bf16WeightCopies, AWeightInBorrowedMemoryIsCastEveryStep) {
  const std::vector<Tensor> initial = mlp_params(12, 32, 5, 7);
  Trainer cast(Optimizer::sgd, false, initial), kept(Optimizer::sgd, true, initial, 2);
  EXPECT_EQ(kept.params[2].impl()->storage->writes(), Storage::kUntracked);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(kept.step(s), cast.step(s)) << "step " << s;
  EXPECT_EQ(kept.exe->bf16_copy_refreshes(), 4 + 2) << "the borrowed weight's, every step";
  (*kept.outside)[5] = 0.25f;  // unseen by Kiln
  cast.params[2].data<float>()[5] = 0.25f;
  EXPECT_EQ(kept.step(3), cast.step(3));
  expect_same_params(kept, cast, "after a write Kiln did not see");
}

// A weight that some node reads after its update (here the graph returns its bf16 cast) keeps
// the cast: a copy written by the update would be read too late.
TEST(Bf16WeightCopies, AWeightReadAfterItsUpdateKeepsItsCast) {
  std::vector<Tensor> params = mlp_params(12, 32, 5, 7);
  Tensor x = random_tensor({16, 12}, 3), labels = random_labels(16, 5, 7);
  Tensor lr = Tensor::scalar(0.05);
  Graph g;
  {
    Tracer tracer(g);
    tracer.bind_state(numbered("p", params));
    Tensor tx = tracer.input(ops::meta_of(x), "x");
    Tensor tl = tracer.input(ops::meta_of(labels), "labels");
    Tensor loss = bf16_mlp_loss(params, tx, tl);
    std::vector<Tensor> grads = gradients(tracer, loss, params);
    for (size_t i = 0; i < params.size(); ++i) ops::sgd_update(params[i], grads[i], lr, 0.0);
    tracer.add_output(loss);
    tracer.add_output(bf16(params[0]));
    tracer.finish();
  }
  Executable exe(std::move(g), {.fusion = true});
  EXPECT_EQ(exe.report().bf16_weight_copies, 3);
  std::vector<Tensor> out = exe.run(std::vector<Tensor>{x, labels});
  Tensor want = Tensor::empty(params[0].shape(), DType::bf16);
  want.copy_from(params[0]);
  const bf16_t* a = out[1].data<bf16_t>();
  const bf16_t* b = want.data<bf16_t>();
  for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(a[i].bits, b[i].bits) << i;
}

}  // namespace
}  // namespace kiln::graph::bf16_weight_copies_test
