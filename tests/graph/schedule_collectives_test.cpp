#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"
#include "kiln/ops/comm/collectives.h"
#include "kiln/parallel/data_parallel.h"

namespace kiln::graph::schedule_collectives_test {
namespace {
using namespace testing;

// An MLP step whose gradients go through data parallelism's bucket ops (one rank: the sums are
// the gradients themselves), one bucket per parameter.
Graph trace_bucketed_step(std::vector<Tensor>& params, const Tensor& x, const Tensor& y,
                          const Tensor& lr) {
  Graph g;
  Tracer tracer(g);
  tracer.bind_state(numbered("p", params, {}));
  Tensor tx = tracer.input(ops::meta_of(x), "x");
  Tensor ty = tracer.input(ops::meta_of(y), "labels");
  Tensor loss = mlp_loss(params, tx, ty);
  std::vector<Tensor> grads = gradients(tracer, loss, params);
  std::vector<Tensor> started;
  for (size_t i = grads.size(); i-- > 0;)
    started.push_back(ops::all_reduce_bucket_start({grads[i]}, 1.0));
  for (size_t k = 0; k < started.size(); ++k) {
    const size_t i = grads.size() - 1 - k;
    Tensor flat = ops::all_reduce_bucket_wait(started[k]);
    grads[i] = ops::reshape(flat, params[i].shape());
  }
  for (size_t i = 0; i < params.size(); ++i) ops::sgd_update(params[i], grads[i], lr, 0.0);
  tracer.add_output(loss);
  tracer.finish();
  return g;
}

TEST(ScheduleCollectives, EachBucketStartsRightAfterItsLastGradient) {
  std::vector<Tensor> p = mlp_params(16, 12, 4, 1);
  Tensor lr = Tensor::scalar(0.1);
  Tensor x = random_tensor({6, 16}, 2);
  Tensor y = random_labels(6, 4, 3);
  Graph g = trace_bucketed_step(p, x, y, lr);
  // Traced after the whole backward, the starts move up into it (all but the first, whose
  // gradient is the last one computed... or already next to it).
  EXPECT_GE(passes::schedule_collectives(g), 1);
  g.verify();
  std::vector<NodeId> order = g.schedule();
  std::vector<int> pos(g.num_nodes(), -1);
  for (size_t i = 0; i < order.size(); ++i) pos[size_t(order[i])] = int(i);
  int starts = 0, previous = -1;
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& n = g.node(order[i]);
    if (n.op != ops::OpKind::all_reduce_bucket_start) continue;
    ++starts;
    const NodeId producer = g.value(n.inputs[0]).producer;
    // Right after its gradient's producer (or after the start placed there before it).
    size_t k = i;
    while (k > 0 && g.node(order[k - 1]).op == ops::OpKind::all_reduce_bucket_start) --k;
    EXPECT_EQ(order[k - 1], producer);
    EXPECT_GT(int(i), previous) << "starts keep their order";
    previous = int(i);
  }
  EXPECT_EQ(starts, 4);
}

TEST(ScheduleCollectives, BucketedStepTrainsAsThePlainStep) {
  std::vector<Tensor> p = mlp_params(16, 12, 4, 1);
  std::vector<Tensor> q = clone_all(p);
  Tensor lr = Tensor::scalar(0.1), lr2 = Tensor::scalar(0.1);
  Tensor x = random_tensor({6, 16}, 2);
  Tensor y = random_labels(6, 4, 3);
  Executable bucketed(trace_bucketed_step(p, x, y, lr), {});
  Executable plain(trace_step(mlp_loss, q, x, y, lr2), {});
  for (int s = 0; s < 3; ++s) {
    float a = bucketed.run(std::vector<Tensor>{x, y})[0].item<float>();
    float b = plain.run(std::vector<Tensor>{x, y})[0].item<float>();
    EXPECT_NEAR(a, b, 1e-6) << "step " << s;
  }
  expect_all_close(p, q, 1e-6, 1e-6, "parameters");
}

TEST(ScheduleCollectives, CollectivesAreNeverMergedOrFolded) {
  Graph g = trace(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::add(ops::all_reduce(in[0]), ops::all_reduce(in[0]))};
      },
      {random_tensor({4}, 1)});
  passes::eliminate_common_subexpressions(g);
  EXPECT_EQ(count_nodes(g, NodeType::op, int(ops::OpKind::all_reduce)), 2);
}

}  // namespace
}  // namespace kiln::graph::schedule_collectives_test
