#include "kiln/graph/tracer.h"

#include "graph_test_util.h"

namespace kiln::graph::tracer_test {
namespace {
using namespace testing;

TEST(Tracer, RecordsOpsInsteadOfRunningThem) {
  Graph g;
  Tracer tracer(g);
  Tensor x = tracer.input({Shape{2, 3}, DType::f32}, "x");
  Tensor y = ops::relu(ops::add(x, x));
  EXPECT_TRUE(y.is_traced());
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  tracer.add_output(y);
  tracer.finish();
  ASSERT_EQ(g.num_live_nodes(), 2u);
  EXPECT_EQ(g.node(0).op, ops::OpKind::add);
  EXPECT_EQ(g.node(1).op, ops::OpKind::relu);
  EXPECT_NO_THROW(g.verify());
}

TEST(Tracer, CapturesRealTensorsByReference) {
  Tensor w = random_tensor({3}, 1);
  Graph g;
  {
    Tracer tracer(g);
    Tensor x = tracer.input({Shape{2, 3}, DType::f32}, "x");
    tracer.add_output(ops::mul(x, w));
    tracer.finish();
  }
  Executable exe(std::move(g), {});
  Tensor x = random_tensor({2, 3}, 2);
  Tensor before = exe.run(std::vector<Tensor>{x})[0];
  expect_all_close({before}, {ops::mul(x, w)}, 0, 0, "first run");
  // Changing w's values changes what the compiled graph computes: it holds w, not a copy.
  *w.data<float>() = 100.f;
  Tensor after = exe.run(std::vector<Tensor>{x})[0];
  expect_all_close({after}, {ops::mul(x, w)}, 0, 0, "after changing w");
}

TEST(Tracer, OrphanedTemporariesBecomeConstantsAndStateStaysState) {
  Tensor w = random_tensor({3}, 1);
  Graph g;
  Tracer tracer(g);
  Tensor x = tracer.input({Shape{3}, DType::f32}, "x");
  Tensor y = ops::add(ops::mul(x, w), Tensor::full({3}, 2.0));
  tracer.add_output(y);
  tracer.finish();
  int constants = 0, states = 0;
  for (size_t v = 0; v < g.num_values(); ++v) {
    constants += g.value(ValueId(v)).kind == ValueKind::constant;
    states += g.value(ValueId(v)).kind == ValueKind::state;
  }
  EXPECT_EQ(constants, 1);  // the temporary full(2.0)
  EXPECT_EQ(states, 1);     // w, which the caller still holds
}

TEST(Tracer, BoundStateIsTracedDuringTheTraceAndRestoredAfter) {
  Tensor a = random_tensor({4}, 1), b = random_tensor({4}, 2);
  Graph g;
  {
    Tracer tracer(g);
    tracer.bind_state({{"a", a}, {"b", b}});
    EXPECT_TRUE(a.is_traced());
    // An op on state alone is recorded too (it must be recomputed every step).
    Tensor s = ops::add(a, b);
    EXPECT_TRUE(s.is_traced());
    Tensor x = tracer.input({Shape{4}, DType::f32}, "x");
    tracer.add_output(ops::mul(x, s));
    tracer.finish();
  }
  EXPECT_FALSE(a.is_traced());
  EXPECT_FALSE(b.is_traced());
  EXPECT_EQ(g.num_live_nodes(), 2u);
  Executable exe(std::move(g), {});
  Tensor x = random_tensor({4}, 3);
  *a.data<float>() = 5.f;
  expect_all_close(exe.run(std::vector<Tensor>{x}), {ops::mul(x, ops::add(a, b))}, 0, 0, "run");
}

TEST(Tracer, TracedTensorOutsideItsTraceIsAClearError) {
  Tensor escaped;
  {
    Graph g;
    Tracer tracer(g);
    escaped = tracer.input({Shape{2}, DType::f32}, "x");
    tracer.finish();
  }
  EXPECT_THROW(ops::relu(escaped), Error);
}

TEST(Tracer, OnlyOneTracePerThread) {
  Graph g1, g2;
  Tracer t1(g1);
  EXPECT_THROW(Tracer t2(g2), Error);
}

}  // namespace
}  // namespace kiln::graph::tracer_test
