#pragma once
// What runs on an op call, in order. Every ops::call passes through this one chain:
//
//   1. autocast      may replace the inputs with cast copies, then calls the op again
//                    (amp::install_autocast(), done by amp::AutocastScope)
//   2. autograd tape after the kernel ran, records the op for backward when grad mode is on and
//                    an input requires grad (autograd::install_tape(), done by train::Model and
//                    by any program that calls autograd::backward or autograd::grad)
//   3. graph tracer  an op on a traced tensor is recorded into the graph being traced instead of
//                    run (graph::install_tracer(), done by graph::Tracer)
//   4. the kernel    the op table's kernel (or view), on freshly allocated outputs
//   observer:        on_kernel, told each eagerly run kernel's begin and end (the profiler)
//
// The chain belongs to the process's dispatch context: each slot is installed explicitly by the
// code that needs it, never by a static initializer, and installing is idempotent and
// thread-safe. The state each interceptor keeps is per thread (grad mode below, the autocast
// scope, the active tracer), so several threads, ranks or an interpreter each run their own
// scopes through the same chain. An empty slot costs one load and one branch per op call.
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln::ops {

// 1. Sets cast_inputs and returns true to rerun the op on them; false leaves the inputs alone.
// The attributes let it weigh what the op costs in each dtype (amp/placement.h).
using AutocastInterceptor = bool (*)(OpKind, std::span<const Tensor> inputs, const Attrs&,
                                     std::vector<Tensor>& cast_inputs);
// 2. Records an op that ran eagerly (called only when grad mode is on, the op has a gradient
// rule and an input requires grad).
using TapeInterceptor = void (*)(OpKind, std::span<const Tensor> inputs,
                                 std::span<const Tensor> outputs, const Attrs&);
// 3. Records an op with a traced input and returns its symbolic outputs.
using TraceInterceptor = std::vector<Tensor> (*)(OpKind, std::span<const Tensor> inputs,
                                                 const Attrs&, std::span<const TensorMeta> outputs);
// Observer: one eagerly run kernel (or view), with its attributes (for the op's cost) and its
// steady-clock begin and end.
using KernelObserver = void (*)(OpKind, std::span<const Tensor> inputs,
                                std::span<const Tensor> outputs, const Attrs&, int64_t begin_ns,
                                int64_t end_ns);

class DispatchChain {
 public:
  constexpr DispatchChain() = default;
  DispatchChain(const DispatchChain&) = delete;
  DispatchChain& operator=(const DispatchChain&) = delete;

  void set_autocast(AutocastInterceptor f) { autocast_.store(f, std::memory_order_release); }
  void set_tape(TapeInterceptor f) { tape_.store(f, std::memory_order_release); }
  void set_tracer(TraceInterceptor f) { tracer_.store(f, std::memory_order_release); }
  // Null removes the observer.
  void set_kernel_observer(KernelObserver f) { on_kernel_.store(f, std::memory_order_release); }

  AutocastInterceptor autocast() const { return autocast_.load(std::memory_order_acquire); }
  TapeInterceptor tape() const { return tape_.load(std::memory_order_acquire); }
  TraceInterceptor tracer() const { return tracer_.load(std::memory_order_acquire); }
  KernelObserver kernel_observer() const { return on_kernel_.load(std::memory_order_acquire); }

 private:
  std::atomic<AutocastInterceptor> autocast_{nullptr};
  std::atomic<TapeInterceptor> tape_{nullptr};
  std::atomic<TraceInterceptor> tracer_{nullptr};
  std::atomic<KernelObserver> on_kernel_{nullptr};
};

// The process's chain (constant-initialized: usable from any thread at any time).
DispatchChain& dispatch_chain();

// Per-thread dispatch state. Whether ops run now are recorded for backward (on by default).
bool grad_enabled();
void set_grad_enabled(bool on);

class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace kiln::ops
