#include "kiln/data/config.h"

#include <algorithm>
#include <atomic>

#include "kiln/core/error.h"
#include "kiln/core/threads.h"

namespace kiln::data::config {
namespace {
std::atomic<uint64_t> g_seed{5489u};
std::atomic<int> g_prefetch{16};
std::atomic<int> g_workers{0};  // 0: the machine's cores
std::atomic<int> g_rows_per_block{32};
}  // namespace

void set_seed(uint64_t seed) {
  g_seed = seed;
}
uint64_t get_seed() {
  return g_seed;
}

void set_prefetch_size(int rows) {
  KILN_CHECK(rows > 0, "config::set_prefetch_size: prefetch_size must be positive, got ", rows);
  g_prefetch = rows;
}
int get_prefetch_size() {
  return g_prefetch;
}

void set_num_parallel_workers(int workers) {
  KILN_CHECK(
      workers >= 0,
      "config::set_num_parallel_workers: num_parallel_workers must be >= 0 (0: the machine's "
      "cores), got ",
      workers);
  g_workers = workers;
}
int get_num_parallel_workers() {
  int w = g_workers;
  return w > 0 ? w : std::max(1, available_cores());
}

void set_rows_per_block(int rows) {
  KILN_CHECK(rows > 0, "config::set_rows_per_block: rows must be positive, got ", rows);
  g_rows_per_block = rows;
}
int get_rows_per_block() {
  return g_rows_per_block;
}

}  // namespace kiln::data::config
