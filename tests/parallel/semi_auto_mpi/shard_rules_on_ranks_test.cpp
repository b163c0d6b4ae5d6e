// Each shard rule on the job's ranks, forward and backward, against the unsharded op run eagerly
// in this process: the op's inputs are bound as parameters (so each rank holds only its block
// and gets a gradient of it), the loss is sum(op(...) * R) for a fixed R, and the sharded
// output, loss and gathered gradients must equal the whole op's. Cases chaining two strategies
// check the redistributions inserted between them.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kiln/autograd/tape.h"
#include "kiln/comm/communicator.h"
#include "kiln/core/parallel_context.h"
#include "kiln/core/random.h"
#include "kiln/graph/autodiff.h"
#include "kiln/graph/executor.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/shard_rule.h"
#include "kiln/parallel/semi_auto.h"

namespace kiln {
namespace {

using ops::OpKind;
using ops::Strategy;

int64_t N() {
  return comm::size();
}

Tensor random_f32(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = gen.uniform(-1.f, 1.f);
  return t;
}

Tensor indices(int64_t n, int64_t below, uint64_t seed) {
  Generator gen(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = int32_t(gen.uniform(0.f, float(below) - 0.01f));
  return Tensor::from_vector(v, Shape({n}));
}

// The whole tensor from this rank's block of it under `layout` (eager collectives).
Tensor whole_of(const Tensor& local, const parallel::TensorLayout* layout) {
  if (!layout) return local;
  const parallel::TensorLayout target =
      parallel::TensorLayout::replicated(layout->shape, layout->ranks());
  return parallel::apply_redistribution(
      local, parallel::plan_redistribution(*layout, target, comm::rank(), local.dtype()));
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = ops::cast(got, DType::f32).to_vector<float>();
  const std::vector<float> w = ops::cast(want, DType::f32).to_vector<float>();
  const double scale = 1.0 + max_abs(w);
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], 1e-5 * scale)
        << what << " element " << i << " on rank " << comm::rank() << " of " << N();
  }
}

// The op under test: called on the inputs inside the strategies' scopes.
using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;
struct Scoped {
  OpKind kind;
  Strategy strategy;
};

void check_sharded(const std::vector<Tensor>& whole_inputs, const OpFn& op,
                   const std::vector<Scoped>& strategies, const std::string& what) {
  SCOPED_TRACE(what);
  autograd::install_tape();
  // The reference: the whole op, eagerly, and the gradients of sum(op * R).
  std::vector<Tensor> ref_inputs, ref_float;
  for (const Tensor& t : whole_inputs) {
    Tensor c = t.clone();
    if (is_floating(c.dtype())) {
      c.set_requires_grad(true);
      ref_float.push_back(c);
    }
    ref_inputs.push_back(c);
  }
  const Tensor ref_out = op(ref_inputs);
  const Tensor r = random_f32(ref_out.shape(), 99);
  const Tensor ref_loss = ops::sum(ops::mul(ref_out, r));
  const std::vector<Tensor> ref_grads = autograd::grad(ref_loss, ref_float);

  // The same under SEMI_AUTO_PARALLEL on this job's ranks.
  set_auto_parallel_context(
      {.parallel_mode = ParallelMode::SEMI_AUTO_PARALLEL, .device_num = int(N())});
  std::vector<nn::NamedTensor> params;
  std::vector<Tensor> floats;
  for (size_t i = 0; i < whole_inputs.size(); ++i) {
    Tensor c = whole_inputs[i].clone();
    params.emplace_back("input" + std::to_string(i), c);
    if (is_floating(c.dtype())) floats.push_back(c);
  }
  const ops::TensorMeta unused{Shape({1}), DType::f32};
  auto forward = [&](const Tensor&, const Tensor&) {
    Tensor out;
    {
      // The strategies cover the op under test, not the loss after it.
      std::vector<std::unique_ptr<ops::ShardScope>> scopes;
      for (const Scoped& s : strategies) {
        scopes.push_back(std::make_unique<ops::ShardScope>(s.kind, s.strategy));
      }
      std::vector<Tensor> in;
      for (const auto& p : params) in.push_back(p.second);
      out = op(in);
    }
    return std::pair{out, ops::sum(ops::mul(out, r))};
  };
  std::unique_ptr<parallel::LogicalStep> step =
      parallel::plan_step(unused, unused, forward, params, {}, floats);
  graph::Graph g;
  {
    graph::Tracer tracer(g);
    tracer.bind_state(params);
    const Tensor x = tracer.input(unused, "images");
    const Tensor y = tracer.input(unused, "labels");
    auto [out, loss] = parallel::trace_local_step(tracer, *step, x, y, true);
    std::vector<Tensor> grads =
        graph::gradients(tracer, loss, floats, parallel::backward_seed(loss));
    grads = parallel::reduce_replicated_gradients(grads, floats);
    tracer.add_output(out);
    tracer.add_output(loss);
    for (const Tensor& gr : grads) tracer.add_output(gr);
    tracer.finish();
  }
  graph::Executable exe(std::move(g), graph::CompileOptions{});
  const Tensor dummy = Tensor::zeros(Shape({1}));
  const std::vector<Tensor> inputs{dummy, dummy};
  const std::vector<Tensor> got = exe.run(inputs);
  expect_close(got[0], ref_out, "output");
  expect_close(got[1], ref_loss, "loss");
  for (size_t i = 0; i < floats.size(); ++i) {
    expect_close(whole_of(got[2 + i], parallel::sharded_layout(floats[i])), ref_grads[i],
                 "gradient " + std::to_string(i));
  }
  EXPECT_NE(step->plan_text.find("your strategy"), std::string::npos) << step->plan_text;
  parallel::forget_sharded_parameters();
  reset_auto_parallel_context();
}

TEST(ShardRulesOnRanks, Matmul) {
  const Tensor x = random_f32(Shape({8, 16}), 1), w = random_f32(Shape({12, 16}), 2);
  const OpFn dense = [](const std::vector<Tensor>& in) {
    return ops::matmul(in[0], in[1], false, true);
  };
  check_sharded({x, w}, dense, {{OpKind::matmul, {{N(), 1}, {1, 1}}}}, "rows of x");
  check_sharded({x, w}, dense, {{OpKind::matmul, {{1, 1}, {N(), 1}}}}, "columns of the output");
  check_sharded({x, w}, dense, {{OpKind::matmul, {{1, N()}, {1, N()}}}},
                "contracted dimension: partial sums all-reduced");
  check_sharded({x, w}, dense, {{OpKind::matmul, {{2, 1}, {N() / 2, 1}}}},
                "rows and columns together");
  const Tensor a = random_f32(Shape({16, 8}), 3), b = random_f32(Shape({16, 12}), 4);
  check_sharded(
      {a, b}, [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], true); },
      {{OpKind::matmul, {{N(), 1}, {N(), 1}}}}, "transposed A, contracted split");
}

TEST(ShardRulesOnRanks, ElementwiseWithBroadcasting) {
  const Tensor x = random_f32(Shape({8, 12}), 5), b = random_f32(Shape({12}), 6),
               z = random_f32(Shape({8, 12}), 7);
  check_sharded(
      {x, b}, [](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); },
      {{OpKind::add, {{1, N()}, {N()}}}}, "bias add, columns");
  check_sharded(
      {x, b}, [](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); },
      {{OpKind::add, {{N(), 1}, {1}}}}, "bias add, rows (bias gradient all-reduced)");
  check_sharded(
      {x, z}, [](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); },
      {{OpKind::mul, {{N(), 1}, {N(), 1}}}}, "mul");
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::gelu(in[0]); },
      {{OpKind::gelu, {{1, N()}}}}, "gelu");
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::relu(in[0]); },
      {{OpKind::relu, {{N(), 1}}}}, "relu");
}

TEST(ShardRulesOnRanks, Reductions) {
  const Tensor x = random_f32(Shape({8, 12}), 8);
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::sum(in[0], {1}); },
      {{OpKind::sum, {{1, N()}}}}, "sum over a split axis: partial sums");
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::sum(in[0], {1}); },
      {{OpKind::sum, {{N(), 1}}}}, "sum over a whole axis");
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::mean(in[0]); },
      {{OpKind::mean, {{N(), 1}}}}, "mean of all, rows split");
}

TEST(ShardRulesOnRanks, ReshapeAndTranspose) {
  const Tensor x = random_f32(Shape({8, 4, 6}), 9);
  check_sharded(
      {x},
      [](const std::vector<Tensor>& in) {
        return ops::reshape(in[0], Shape({8, 24}));
      },
      {{OpKind::reshape, {{N(), 1, 1}}}}, "reshape keeping the leading split");
  const Tensor y = random_f32(Shape({8, 12}), 10);
  check_sharded(
      {y},
      [](const std::vector<Tensor>& in) {
        return ops::transpose(in[0], {1, 0});
      },
      {{OpKind::transpose, {{N(), 1}}}}, "transpose");
}

TEST(ShardRulesOnRanks, SoftmaxCrossEntropyLayerNormEmbedding) {
  const Tensor x = random_f32(Shape({8, 12}), 11);
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::softmax(in[0], -1); },
      {{OpKind::softmax, {{N(), 1}}}}, "softmax");
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::log_softmax(in[0], -1); },
      {{OpKind::log_softmax, {{N(), 1}}}}, "log_softmax");
  const Tensor labels = indices(8, 12, 12);
  check_sharded(
      {x, labels},
      [](const std::vector<Tensor>& in) { return ops::softmax_cross_entropy(in[0], in[1], 0); },
      {{OpKind::softmax_cross_entropy, {{N(), 1}, {N()}}}}, "cross entropy, batch");
  const Tensor gamma = random_f32(Shape({12}), 13), beta = random_f32(Shape({12}), 14);
  check_sharded(
      {x, gamma, beta},
      [](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], in[1], in[2], 1e-5)[0]; },
      {{OpKind::layer_norm, {{N(), 1}, {1}, {1}}}}, "layer norm, rows");
  const Tensor table = random_f32(Shape({10, 8}), 15);
  const Tensor ids = indices(8, 10, 16);
  const OpFn lookup = [](const std::vector<Tensor>& in) { return ops::embedding(in[0], in[1]); };
  check_sharded({table, ids}, lookup, {{OpKind::embedding, {{1, N()}, {1}}}},
                "embedding, columns of the table");
  check_sharded({table, ids}, lookup, {{OpKind::embedding, {{1, 1}, {N()}}}},
                "embedding, indices split");
}

TEST(ShardRulesOnRanks, RedistributionsBetweenStrategies) {
  const Tensor x = random_f32(Shape({8, 16}), 17), w = random_f32(Shape({12, 16}), 18);
  const OpFn dense_relu = [](const std::vector<Tensor>& in) {
    return ops::relu(ops::matmul(in[0], in[1], false, true));
  };
  // Partial sums wanted split by rows: a reduce_scatter.
  check_sharded({x, w}, dense_relu,
                {{OpKind::matmul, {{1, N()}, {1, N()}}}, {OpKind::relu, {{N(), 1}}}},
                "partial sums to rows");
  // Columns wanted as rows: all_gather then a local slice.
  check_sharded({x, w}, dense_relu,
                {{OpKind::matmul, {{1, 1}, {N(), 1}}}, {OpKind::relu, {{N(), 1}}}},
                "columns to rows");
  // A [2, N/2] grid wanted as columns only.
  check_sharded({x, w}, dense_relu,
                {{OpKind::matmul, {{2, 1}, {N() / 2, 1}}}, {OpKind::relu, {{1, 2}}}},
                "grid to columns");
}

}  // namespace
}  // namespace kiln
