#include "kiln/graph/memory_plan.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "kiln/core/error.h"

namespace kiln::graph {
namespace {

int64_t value_bytes(const Value& v) {
  return v.meta.shape.numel() * int64_t(dtype_size(v.meta.dtype));
}

int64_t round_up(int64_t n, int64_t a) {
  return (n + a - 1) / a * a;
}

// The inputs (by index) whose buffer output `out` may take over when the input dies at `node`:
// any input of a pointwise node's single output or of a fused reduction's chain result; for the
// batch-norm backward kernels, fused or not, and the pooled convolution gradient, the ones their
// passes read only before or where they write (see batch_norm_rows.h). Writing over a gradient just
// read, instead of into memory last touched a whole step ago, also spares the write its fetch from
// DRAM.
std::vector<int> inplace_inputs(const Node& node, size_t out) {
  // A fused reduction's chain result (output 1) is computed tile by tile exactly as a fused
  // elementwise node's output is.
  if ((is_pointwise(node) && node.outputs.size() == 1) ||
      (node.type == NodeType::fused_reduction && out == 1)) {
    std::vector<int> all(node.inputs.size());
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  // dx over the incoming gradient g: the second pass reads g and x where it writes dx. The
  // unfused op runs the same kernel, or oneDNN's, which allows it too.
  if (node.type == NodeType::bn_relu_grad && out == 0) return {0};
  if (node.type == NodeType::op && node.op == ops::OpKind::batch_norm_grad && out == 0) return {0};
  // The first pass reads a and b where it writes dy = relu_grad(a + b); the second reads dy
  // and x where it writes dx, a no longer read.
  if (node.type == NodeType::bn_add_relu_grad && out == 3) return {1};
  if (node.type == NodeType::bn_add_relu_grad && out == 0) return {0};
  // The pooled convolution gradient copies each image of x into its own padded buffer before it
  // writes that image's dx, and a thread owns whole images: dx (the last output, present when
  // w is an input) may overwrite x.
  if (node.type == NodeType::pooled_conv_grad && node.inputs.size() > 3 &&
      node.inputs[3] != kNoValue && out == node.outputs.size() - 1) {
    return {2};
  }
  return {};
}

// Where `bytes` (> 0) fit best between the busy ranges [lo, hi): the start of the smallest gap
// that holds them, or kNone. `busy_end` receives where the last busy range ends.
int64_t best_fit(std::vector<std::pair<int64_t, int64_t>>& busy, int64_t bytes, int64_t& busy_end) {
  std::sort(busy.begin(), busy.end());
  int64_t best = MemoryPlan::kNone, best_gap = INT64_MAX;
  busy_end = 0;
  for (auto [lo, hi] : busy) {
    if (lo - busy_end >= bytes && lo - busy_end < best_gap) {
      best = busy_end;
      best_gap = lo - busy_end;
    }
    busy_end = std::max(busy_end, hi);
  }
  return best;
}

}  // namespace

bool is_pointwise(const Node& node) {
  if (node.type == NodeType::fused_elementwise) return true;
  return node.type == NodeType::op && ops::op_def(node.op).tile != nullptr &&
         ops::op_def(node.op).mutated_inputs == 0;
}

MemoryPlan plan_memory(const Graph& graph, const std::vector<bool>& view_aliases,
                       const PlanOptions& options) {
  MemoryPlan plan;
  plan.schedule = graph.schedule();
  const size_t nv = graph.num_values();
  const int end = int(plan.schedule.size());
  plan.buffer_of.assign(nv, MemoryPlan::kNone);
  plan.alias_of.resize(nv);
  std::iota(plan.alias_of.begin(), plan.alias_of.end(), 0);

  // Which values own memory in the arena, and which alias another value's memory.
  std::vector<bool> owns(nv);
  const std::vector<ValueId>& inputs = graph.inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    owns[size_t(inputs[i])] = i >= options.inputs_in_place.size() || !options.inputs_in_place[i];
  }
  for (NodeId n : plan.schedule) {
    const Node& node = graph.node(n);
    bool alias = is_view(node) && view_aliases[size_t(n)];
    for (ValueId v : node.outputs) {
      if (alias) {
        plan.alias_of[size_t(v)] = plan.alias_of[size_t(node.inputs[0])];
      } else {
        owns[size_t(v)] = true;
      }
    }
  }

  // Lifetimes of each owning value, including uses through aliasing views.
  std::vector<int> first(nv, end), last(nv, -2);
  for (ValueId v : graph.inputs()) first[size_t(v)] = -1;
  for (int pos = 0; pos < end; ++pos) {
    const Node& node = graph.node(plan.schedule[size_t(pos)]);
    for (ValueId v : node.outputs) {
      ValueId r = plan.alias_of[size_t(v)];
      first[size_t(r)] = std::min(first[size_t(r)], pos);
      last[size_t(r)] = std::max(last[size_t(r)], pos);
    }
    for (ValueId v : node.inputs) {
      if (v == kNoValue) continue;
      ValueId r = plan.alias_of[size_t(v)];
      last[size_t(r)] = std::max(last[size_t(r)], pos);
    }
  }
  for (ValueId v : graph.outputs()) last[size_t(plan.alias_of[size_t(v)])] = end;
  // An input nothing reads is still copied in before the first node.
  for (ValueId v : graph.inputs()) last[size_t(v)] = std::max(last[size_t(v)], -1);

  // Assign buffers in schedule order so in-place reuse can hand a dying input's buffer on.
  auto new_buffer = [&](ValueId v) {
    MemoryPlan::Buffer b;
    b.bytes = round_up(std::max<int64_t>(value_bytes(graph.value(v)), 1), options.alignment);
    b.first = first[size_t(v)];
    b.last = last[size_t(v)];
    b.values.push_back(v);
    plan.buffers.push_back(std::move(b));
    plan.buffer_of[size_t(v)] = int(plan.buffers.size() - 1);
  };
  for (ValueId v : graph.inputs()) {
    if (owns[size_t(v)]) new_buffer(v);
  }
  std::vector<bool> is_output(nv);
  for (ValueId v : graph.outputs()) is_output[size_t(plan.alias_of[size_t(v)])] = true;
  for (int pos = 0; pos < end; ++pos) {
    const Node& node = graph.node(plan.schedule[size_t(pos)]);
    for (size_t oi = 0; oi < node.outputs.size(); ++oi) {
      const ValueId out = node.outputs[oi];
      if (!owns[size_t(out)]) continue;
      int reuse = MemoryPlan::kNone;
      if (options.inplace) {
        const Value& ov = graph.value(out);
        for (int ii : inplace_inputs(node, oi)) {
          const ValueId in = node.inputs[size_t(ii)];
          if (in == kNoValue) continue;
          ValueId r = plan.alias_of[size_t(in)];
          int b = plan.buffer_of[size_t(r)];
          // The input must be a whole arena value (not a view), die here, and match exactly.
          if (b == MemoryPlan::kNone || r != in || last[size_t(r)] != pos || is_output[size_t(r)])
            continue;
          if (graph.value(in).meta != ov.meta) continue;
          if (plan.buffers[size_t(b)].last != pos) continue;
          // No other input of this node may read the same memory through a different view.
          bool clash = false;
          for (ValueId other : node.inputs) {
            if (other != kNoValue && other != in && plan.alias_of[size_t(other)] == r) clash = true;
          }
          if (clash) continue;
          reuse = b;
          break;
        }
      }
      if (reuse != MemoryPlan::kNone) {
        MemoryPlan::Buffer& b = plan.buffers[size_t(reuse)];
        b.last = std::max(b.last, last[size_t(out)]);
        b.values.push_back(out);
        plan.buffer_of[size_t(out)] = reuse;
        ++plan.inplace_reuses;
      } else {
        if (last[size_t(out)] < pos) last[size_t(out)] = pos;  // written, never read
        new_buffer(out);
      }
    }
  }

  if (options.whole_step_lifetimes) {
    for (MemoryPlan::Buffer& b : plan.buffers) {
      b.first = -1;
      b.last = end;
    }
  }

  // Kernels' workspaces, where their sizes are known: packed with the tensors as buffers live at
  // their kernel's position alone, then moved to plan.workspaces.
  const size_t value_buffers = plan.buffers.size();
  for (size_t pos = 0; pos < options.workspace_bytes.size() && int(pos) < end; ++pos) {
    if (options.workspace_bytes[pos] <= 0) continue;
    MemoryPlan::Buffer w;
    w.bytes = round_up(options.workspace_bytes[pos], options.alignment);
    w.first = w.last = int(pos);
    plan.buffers.push_back(std::move(w));
  }

  // Pack: largest first, each at the best-fitting gap among buffers live at the same time.
  std::vector<int> order(plan.buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return plan.buffers[size_t(a)].bytes > plan.buffers[size_t(b)].bytes;
  });
  std::vector<int> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of conflicting buffers
  for (int i : order) {
    MemoryPlan::Buffer& b = plan.buffers[size_t(i)];
    busy.clear();
    for (int j : placed) {
      const MemoryPlan::Buffer& o = plan.buffers[size_t(j)];
      if (o.first <= b.last && b.first <= o.last) busy.emplace_back(o.offset, o.offset + o.bytes);
    }
    int64_t busy_end = 0;
    const int64_t best = best_fit(busy, b.bytes, busy_end);
    b.offset = best != MemoryPlan::kNone ? best : busy_end;
    plan.arena_bytes = std::max(plan.arena_bytes, b.offset + b.bytes);
    plan.total_bytes += b.bytes;
    placed.push_back(i);
  }

  // Peak of simultaneously live bytes, for the report.
  std::vector<int64_t> delta(size_t(end) + 3);
  for (const MemoryPlan::Buffer& b : plan.buffers) {
    delta[size_t(b.first + 1)] += b.bytes;
    delta[size_t(b.last + 2)] -= b.bytes;
  }
  int64_t live = 0;
  for (int64_t d : delta) {
    live += d;
    plan.live_bytes_peak = std::max(plan.live_bytes_peak, live);
  }
  for (size_t i = value_buffers; i < plan.buffers.size(); ++i) {
    const MemoryPlan::Buffer& w = plan.buffers[i];
    plan.workspaces.push_back({w.offset, w.bytes, w.first, /*reserved=*/true});
  }
  plan.buffers.resize(value_buffers);
  return plan;
}

int64_t place_workspace(MemoryPlan& plan, int position, int64_t bytes) {
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of what is live there
  for (const MemoryPlan::Buffer& b : plan.buffers) {
    if (b.first <= position && position <= b.last) busy.emplace_back(b.offset, b.offset + b.bytes);
  }
  for (const MemoryPlan::Workspace& w : plan.workspaces) {
    if (w.position == position) busy.emplace_back(w.offset, w.offset + w.bytes);
  }
  busy.emplace_back(plan.arena_bytes, plan.arena_bytes);  // the arena's end closes the last gap
  int64_t busy_end = 0;
  const int64_t best = best_fit(busy, bytes, busy_end);
  if (best != MemoryPlan::kNone) plan.workspaces.push_back({best, bytes, position, false});
  return best;
}

void check_memory_plan(const MemoryPlan& plan) {
  // Sweep positions in order; at each, the live buffers' ranges must be disjoint.
  std::vector<int> order(plan.buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return plan.buffers[size_t(a)].offset < plan.buffers[size_t(b)].offset;
  });
  for (const MemoryPlan::Buffer& b : plan.buffers) {
    if (b.offset < 0 || b.offset + b.bytes > plan.arena_bytes) {
      throw Error("memory plan: buffer of %" + std::to_string(b.values.front()) +
                  " lies outside the arena");
    }
    if (b.first > b.last) {
      throw Error("memory plan: buffer of %" + std::to_string(b.values.front()) +
                  " has an empty lifetime");
    }
  }
  for (size_t x = 0; x < order.size(); ++x) {
    const MemoryPlan::Buffer& a = plan.buffers[size_t(order[x])];
    for (size_t y = x + 1; y < order.size(); ++y) {
      const MemoryPlan::Buffer& b = plan.buffers[size_t(order[y])];
      if (b.offset >= a.offset + a.bytes) break;  // sorted by offset: no later one overlaps a
      if (a.first <= b.last && b.first <= a.last) {
        throw Error("memory plan: %" + std::to_string(a.values.front()) + " and %" +
                    std::to_string(b.values.front()) + " are live together at positions [" +
                    std::to_string(std::max(a.first, b.first)) + ", " +
                    std::to_string(std::min(a.last, b.last)) + "] and overlap in the arena");
      }
    }
  }
  for (const MemoryPlan::Workspace& w : plan.workspaces) {
    const std::string at = "memory plan: the workspace at position " + std::to_string(w.position);
    if (w.offset < 0 || w.offset + w.bytes > plan.arena_bytes) {
      throw Error(at + " lies outside the arena");
    }
    for (const MemoryPlan::Buffer& b : plan.buffers) {
      if (b.first <= w.position && w.position <= b.last && w.offset < b.offset + b.bytes &&
          b.offset < w.offset + w.bytes) {
        throw Error(at + " overlaps %" + std::to_string(b.values.front()) + ", live there");
      }
    }
  }
}

}  // namespace kiln::graph
