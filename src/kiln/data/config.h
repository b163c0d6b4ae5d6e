#pragma once
// Process-wide defaults of the data pipeline (MindSpore's mindspore.dataset.config).
#include <cstdint>

namespace kiln::data::config {

// Seed of shuffling, sampling and random transforms. Default 5489 (std::mt19937's), so a run is
// reproducible and every shard of a distributed job draws the same per-epoch permutation.
void set_seed(uint64_t seed);
uint64_t get_seed();

// Queue capacity between stages, in rows (rounded up to whole blocks; after batch, a row is a
// batch). Default 16, MindSpore's.
void set_prefetch_size(int rows);
int get_prefetch_size();

// Default worker threads of map (and of sources that read in parallel). Default: the cores this
// process may run on (never a fixed number that oversubscribes a small machine). 0 restores it.
void set_num_parallel_workers(int workers);
int get_num_parallel_workers();

// Rows that move between stages in one hand-off. Default 32: enough to make the per-row cost of
// queue hand-offs negligible, small enough to keep latency and memory low.
void set_rows_per_block(int rows);
int get_rows_per_block();

}  // namespace kiln::data::config
