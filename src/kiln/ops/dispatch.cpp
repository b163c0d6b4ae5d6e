#include "kiln/ops/dispatch.h"

#include <chrono>
#include <exception>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/kernel_threads.h"
#include "kiln/ops/kernel_name.h"

namespace kiln::ops {
namespace {

std::vector<Tensor> call_via_f32(OpKind kind, std::span<const Tensor> inputs, const Attrs& attrs);

// The process's chain (dispatch_chain.h), constant-initialized so no static constructor runs.
constinit DispatchChain g_chain;

thread_local bool t_grad_enabled = true;
thread_local bool t_in_widened_f32_call = false;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void check_arity(const OpDef& def, size_t given) {
  if (def.num_inputs < 0) return;
  const size_t most = size_t(def.num_inputs), fewest = most - size_t(def.optional_inputs);
  if (given < fewest || given > most) {
    const std::string expected = fewest == most
                                     ? std::to_string(most)
                                     : std::to_string(fewest) + " to " + std::to_string(most);
    throw ShapeError(std::string(def.name) + ": expects " + expected + " inputs, got " +
                     std::to_string(given));
  }
}

Tensor cast_to(const Tensor& t, DType dtype) {
  return call_one_output(OpKind::cast, {t}, CastAttrs{.dtype = dtype});
}

// See OpDef::f16_kernels.
std::vector<Tensor> call_via_f32(OpKind kind, std::span<const Tensor> inputs, const Attrs& attrs) {
  std::vector<Tensor> wide(inputs.begin(), inputs.end());
  for (Tensor& t : wide) {
    if (t.dtype() == DType::f16) t = cast_to(t, DType::f32);
  }
  // The widened call must not be narrowed again by an autocast scope.
  t_in_widened_f32_call = true;
  std::vector<Tensor> outputs;
  try {
    outputs = call(kind, wide, attrs);
  } catch (...) {
    t_in_widened_f32_call = false;
    throw;
  }
  t_in_widened_f32_call = false;
  for (Tensor& t : outputs) {
    if (t.dtype() == DType::f32) t = cast_to(t, DType::f16);
  }
  return outputs;
}

}  // namespace

DispatchChain& dispatch_chain() {
  return g_chain;
}

bool grad_enabled() {
  return t_grad_enabled;
}
void set_grad_enabled(bool on) {
  t_grad_enabled = on;
}

void check_attrs(OpKind kind, const Attrs& attrs) {
  const OpDef& def = op_def(kind);
  if (attrs.kind() != def.attrs) {
    throw Error(std::string(def.name) + ": takes " + std::string(attrs_kind_name(def.attrs)) +
                ", got " + std::string(attrs_kind_name(attrs.kind())));
  }
}

std::vector<TensorMeta> infer(OpKind kind, std::span<const TensorMeta> inputs, const Attrs& attrs) {
  const OpDef& def = op_def(kind);
  check_arity(def, inputs.size());
  check_attrs(kind, attrs);
  return def.infer(inputs, attrs);
}

Tensor allocate(const TensorMeta& meta) {
  if (meta.layout == Layout::channels_last && meta.shape.rank() == 4) {
    return Tensor::empty_strided(meta.shape, channels_last_strides(meta.shape), meta.dtype);
  }
  return Tensor::empty(meta.shape, meta.dtype);
}

int eager_kernel_threads(const OpDef& def, std::span<const TensorMeta> inputs,
                         std::span<const TensorMeta> outputs, const Attrs& attrs) {
  const int budget = launch_budget();
  if (budget <= 1 || def.view) return 1;
  if (def.cost == nullptr) return budget;
  Cost cost;
  try {
    cost = def.cost(inputs, outputs, attrs);
  } catch (const std::exception&) {
    return budget;  // a form the cost formula does not cover: the whole team, as before
  }
  return threads_for({.flops = cost.flops, .bytes = cost.bytes});
}

void run_kernel(OpKind kind, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                const Attrs& attrs) {
  const OpDef& def = op_def(kind);
  if (def.view) {
    outputs[0] = def.view(inputs[0], attrs);
    return;
  }
  def.kernel(inputs, outputs, attrs);
}

std::vector<Tensor> call(OpKind kind, std::span<const Tensor> inputs, const Attrs& attrs) {
  const OpDef& def = op_def(kind);
  check_arity(def, inputs.size());
  if (attrs.kind() != def.attrs) check_attrs(kind, attrs);
  // 1. Autocast.
  if (AutocastInterceptor autocast = g_chain.autocast(); autocast && !t_in_widened_f32_call) {
    std::vector<Tensor> cast_inputs;
    if (autocast(kind, inputs, attrs, cast_inputs)) return call(kind, cast_inputs, attrs);
  }
  std::vector<TensorMeta> in_metas;
  in_metas.reserve(inputs.size());
  bool traced = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      throw Error(std::string(def.name) + ": input " + std::to_string(i) + " is undefined");
    }
    in_metas.push_back(meta_of(inputs[i]));
    traced = traced || inputs[i].is_traced();
  }
  if (!def.f16_kernels) {
    bool any_f16 = false;
    for (const TensorMeta& m : in_metas) any_f16 = any_f16 || m.dtype == DType::f16;
    if (any_f16) return call_via_f32(kind, inputs, attrs);
  }
  std::vector<TensorMeta> out_metas = def.infer(in_metas, attrs);
  // 3. The graph tracer takes every op on a traced tensor (the tape never sees those).
  if (traced) {
    TraceInterceptor tracer = g_chain.tracer();
    if (!tracer) throw Error(std::string(def.name) + ": traced input but no graph is tracing");
    return tracer(kind, inputs, attrs, out_metas);
  }

  // 4. The kernel, on the threads its work pays for, with the observer around it.
  std::vector<Tensor> outputs(out_metas.size());
  KernelThreads team(eager_kernel_threads(def, in_metas, out_metas, attrs));
  KernelObserver on_kernel = g_chain.kernel_observer();
  if (on_kernel) clear_kernel_notes();  // the observer takes what this kernel notes
  int64_t begin = on_kernel ? now_ns() : 0;
  if (def.view) {
    outputs[0] = def.view(inputs[0], attrs);
  } else {
    for (size_t i = 0; i < out_metas.size(); ++i) outputs[i] = allocate(out_metas[i]);
    def.kernel(inputs, outputs, attrs);
  }
  if (on_kernel) on_kernel(kind, inputs, outputs, attrs, begin, now_ns());
  for (size_t i = 0; def.mutated_inputs != 0 && i < inputs.size() && i < 32; ++i) {
    if (def.mutated_inputs >> i & 1u) inputs[i].mark_written();
  }

  // 2. The autograd tape records what the kernel computed.
  if (t_grad_enabled && def.grad) {
    if (TapeInterceptor tape = g_chain.tape()) {
      for (const Tensor& t : inputs) {
        if (t.requires_grad()) {
          tape(kind, inputs, outputs, attrs);
          break;
        }
      }
    }
  }
  return outputs;
}

Tensor call_one_output(OpKind kind, std::initializer_list<Tensor> inputs, const Attrs& attrs) {
  return std::move(call(kind, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs)[0]);
}

}  // namespace kiln::ops
