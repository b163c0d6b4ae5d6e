#include "kiln/graph/launch_observer.h"

#include <atomic>

namespace kiln::graph {
namespace {

constinit std::atomic<LaunchObserver> g_launch_observer{nullptr};

}  // namespace

void set_launch_observer(LaunchObserver observer) {
  g_launch_observer.store(observer, std::memory_order_release);
}

LaunchObserver launch_observer() {
  return g_launch_observer.load(std::memory_order_acquire);
}

}  // namespace kiln::graph
