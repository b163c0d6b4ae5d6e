// Inter-op parallelism (CompileOptions::concurrent_groups): a graph of independent parts splits
// into groups that threads run side by side, with the results of running it whole; no group
// writes memory another group touches; a graph that is one part stays one group.
#include <thread>

#include "graph_test_util.h"

namespace kiln::graph::launch_groups_test {
namespace {
using namespace testing;

constexpr int kSlices = 2;

// The update of a batch split in two slices: each parameter's two gradients (graph inputs)
// summed and applied by momentum SGD, and the two slices' losses summed.
struct SummedUpdate {
  std::vector<Tensor> params, velocities;
  Tensor lr = Tensor::scalar(0.05);
  std::vector<Tensor> inputs;  // slice 0's loss and gradients, then slice 1's

  explicit SummedUpdate(const std::vector<int64_t>& sizes) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      params.push_back(random_tensor({sizes[i]}, 10 + i));
      velocities.push_back(random_tensor({sizes[i]}, 20 + i));
    }
    for (int s = 0; s < kSlices; ++s) {
      inputs.push_back(Tensor::scalar(0.5 + s));
      for (size_t i = 0; i < sizes.size(); ++i) {
        inputs.push_back(random_tensor({sizes[i]}, 100 * uint64_t(s + 1) + i));
      }
    }
  }

  Graph trace() {
    Graph g;
    Tracer tracer(g);
    tracer.bind_state(numbered("p", params, numbered("v", velocities, {{"lr", lr}})));
    std::vector<Tensor> traced;
    for (size_t k = 0; k < inputs.size(); ++k) {
      traced.push_back(tracer.input(ops::meta_of(inputs[k]), "in" + std::to_string(k)));
    }
    const size_t n = params.size();
    for (size_t i = 0; i < n; ++i) {
      const Tensor grad = ops::add(traced[1 + i], traced[n + 2 + i]);
      ops::momentum_update(params[i], grad, velocities[i], lr, 0.9, 0.01, false);
    }
    tracer.add_output(ops::add(traced[0], traced[n + 1]));
    tracer.finish();
    return g;
  }
};

// Byte ranges [begin, end) of the arena that launch li reads and writes (values with a buffer).
struct Touched {
  std::vector<std::pair<int64_t, int64_t>> read, written;
};
Touched arena_ranges(const Executable& exe, size_t li) {
  const Graph& g = exe.graph();
  const MemoryPlan& plan = exe.plan();
  const Node& node = g.node(exe.launch_info(li).node);
  Touched t;
  auto range = [&](ValueId v) -> std::optional<std::pair<int64_t, int64_t>> {
    const int b = plan.buffer_of[size_t(plan.alias_of[size_t(v)])];
    if (b == MemoryPlan::kNone) return std::nullopt;
    const MemoryPlan::Buffer& buffer = plan.buffers[size_t(b)];
    return std::make_pair(buffer.offset, buffer.offset + buffer.bytes);
  };
  for (ValueId v : node.inputs) {
    if (v == kNoValue) continue;
    if (auto r = range(v)) t.read.push_back(*r);
  }
  for (ValueId v : node.outputs) {
    if (auto r = range(v)) t.written.push_back(*r);
  }
  return t;
}

bool overlap(std::pair<int64_t, int64_t> a, std::pair<int64_t, int64_t> b) {
  return a.first < b.second && b.first < a.second;
}

// Every launch in exactly one group (or after them), each group in schedule order, and no arena
// byte written by one group read or written by another.
void expect_independent_groups(const Executable& exe) {
  std::vector<int> group_of(exe.num_launches(), -1);
  for (size_t li : exe.launches_after_groups()) group_of[li] = exe.num_groups();
  for (int g = 0; g < exe.num_groups(); ++g) {
    const std::vector<size_t>& launches = exe.group_launches(g);
    EXPECT_TRUE(std::is_sorted(launches.begin(), launches.end()));
    for (size_t li : launches) {
      EXPECT_EQ(group_of[li], -1) << "launch " << li << " in two groups";
      group_of[li] = g;
    }
  }
  for (size_t li = 0; li < exe.num_launches(); ++li) ASSERT_GE(group_of[li], 0) << li;
  for (size_t a = 0; a < exe.num_launches(); ++a) {
    const Touched ta = arena_ranges(exe, a);
    for (size_t b = 0; b < exe.num_launches(); ++b) {
      // Launches after the groups run alone.
      if (group_of[a] == group_of[b] || group_of[a] == exe.num_groups() ||
          group_of[b] == exe.num_groups()) {
        continue;
      }
      const Touched tb = arena_ranges(exe, b);
      for (auto w : ta.written) {
        for (auto r : tb.read) EXPECT_FALSE(overlap(w, r)) << "launches " << a << ", " << b;
        for (auto r : tb.written) EXPECT_FALSE(overlap(w, r)) << "launches " << a << ", " << b;
      }
    }
  }
}

TEST(LaunchGroups, ParametersUpdatesSplitIntoBalancedGroupsAndTrainAsOneGraph) {
  // One large parameter and four that together cost about as much: the large one's update is a
  // group of its own.
  const std::vector<int64_t> sizes{40000, 9000, 11000, 10000, 9500};
  SummedUpdate grouped(sizes), whole(sizes);
  Executable exe(grouped.trace(), {.concurrent_groups = kSlices});
  Executable reference(whole.trace(), {});
  ASSERT_EQ(exe.num_groups(), 2);
  EXPECT_EQ(exe.report().concurrent_groups, 2);
  EXPECT_EQ(reference.num_groups(), 1);
  expect_independent_groups(exe);
  const Graph& g = exe.graph();
  int largest_group = -1;
  for (int group = 0; group < 2; ++group) {
    for (size_t li : exe.group_launches(group)) {
      const Node& node = g.node(exe.launch_info(li).node);
      if (node.op == ops::OpKind::momentum_update &&
          g.value(node.inputs[0]).meta.shape.numel() == sizes[0]) {
        largest_group = group;
      }
    }
  }
  ASSERT_GE(largest_group, 0);
  int updates_beside_largest = 0;
  for (size_t li : exe.group_launches(largest_group)) {
    const Node& node = g.node(exe.launch_info(li).node);
    updates_beside_largest += node.op == ops::OpKind::momentum_update;
  }
  EXPECT_EQ(updates_beside_largest, 1);

  for (int step = 0; step < 3; ++step) {
    exe.begin_groups(grouped.inputs);
    std::thread other([&] { exe.run_group(1); });
    exe.run_group(0);
    other.join();
    const float loss = exe.end_groups()[0].item<float>();
    EXPECT_EQ(loss, reference.run(whole.inputs)[0].item<float>());
  }
  // Elementwise updates: the same bits, whichever thread ran them.
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(grouped.params[i].to_vector<float>(), whole.params[i].to_vector<float>()) << i;
    EXPECT_EQ(grouped.velocities[i].to_vector<float>(), whole.velocities[i].to_vector<float>());
  }
  // run() runs the groups one after another.
  const float loss = exe.run(grouped.inputs)[0].item<float>();
  EXPECT_EQ(loss, reference.run(whole.inputs)[0].item<float>());
  EXPECT_EQ(grouped.params[0].to_vector<float>(), whole.params[0].to_vector<float>());
}

TEST(LaunchGroups, ALargePartStreamingFromMemoryRunsAfterTheGroups) {
  // 400,000 elements: its sum and update move 12.8 MB, more than a core's cache holds, and cost
  // more than everything else together.
  const std::vector<int64_t> sizes{400000, 3000, 2000, 2500};
  SummedUpdate grouped(sizes), whole(sizes);
  Executable exe(grouped.trace(), {.concurrent_groups = kSlices});
  Executable reference(whole.trace(), {});
  ASSERT_EQ(exe.num_groups(), 2);
  const Graph& g = exe.graph();
  ASSERT_EQ(exe.launches_after_groups().size(), 2u);  // its sum and its update
  for (size_t li : exe.launches_after_groups()) {
    const Node& node = g.node(exe.launch_info(li).node);
    EXPECT_EQ(g.value(node.inputs[0]).meta.shape.numel(), sizes[0]) << node_label(node);
  }
  expect_independent_groups(exe);
  for (int step = 0; step < 2; ++step) {
    exe.begin_groups(grouped.inputs);
    std::thread other([&] { exe.run_group(1); });
    exe.run_group(0);
    other.join();
    EXPECT_EQ(exe.end_groups()[0].item<float>(), reference.run(whole.inputs)[0].item<float>());
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(grouped.params[i].to_vector<float>(), whole.params[i].to_vector<float>()) << i;
  }
}

TEST(LaunchGroups, NoMoreGroupsThanParts) {
  SummedUpdate update({300, 200});  // two updates and the losses' sum: three parts
  Executable exe(update.trace(), {.concurrent_groups = 8});
  EXPECT_EQ(exe.num_groups(), 3);
  expect_independent_groups(exe);
}

TEST(LaunchGroups, AChainIsOnePartAndOneGroup) {
  const std::vector<Tensor> in{random_tensor({64}, 1), random_tensor({64}, 2),
                               random_tensor({64}, 3)};
  Executable exe(trace(
                     [](const std::vector<Tensor>& x) {
                       return std::vector<Tensor>{ops::mul(ops::relu(ops::add(x[0], x[1])), x[2])};
                     },
                     in),
                 {.optimize = false, .concurrent_groups = 2});
  ASSERT_GE(exe.num_launches(), 3u);
  EXPECT_EQ(exe.num_groups(), 1);
  EXPECT_EQ(exe.report().concurrent_groups, 1);
  EXPECT_EQ(exe.group_launches(0).size(), exe.num_launches());
}

TEST(LaunchGroups, WholeStepLifetimesShareNoMemory) {
  SummedUpdate update({1000, 2000, 3000});
  Graph g = update.trace();
  std::vector<bool> aliases(g.num_nodes(), true);
  // Inputs read in place, so that the sums get buffers of their own.
  const std::vector<bool> in_place(g.inputs().size(), true);
  const MemoryPlan shared = plan_memory(g, aliases, {.inputs_in_place = in_place});
  const MemoryPlan apart =
      plan_memory(g, aliases, {.inputs_in_place = in_place, .whole_step_lifetimes = true});
  check_memory_plan(apart);
  for (size_t a = 0; a < apart.buffers.size(); ++a) {
    for (size_t b = a + 1; b < apart.buffers.size(); ++b) {
      const MemoryPlan::Buffer &x = apart.buffers[a], &y = apart.buffers[b];
      EXPECT_FALSE(overlap({x.offset, x.offset + x.bytes}, {y.offset, y.offset + y.bytes}))
          << a << ", " << b;
    }
  }
  EXPECT_GT(apart.arena_bytes, shared.arena_bytes);  // the sums' buffers were shared before
}

}  // namespace
}  // namespace kiln::graph::launch_groups_test
