#pragma once
#include <cstdint>
#include <random>

namespace kiln {

// The process's seeded random source for initializers, dropout and data shuffling.
// `set_seed` makes a run reproducible.
class Generator {
 public:
  explicit Generator(uint64_t seed = 5489u) : engine_(seed) {}
  void seed(uint64_t s) { engine_.seed(s); }
  uint64_t next_u64() { return engine_(); }
  float uniform(float lo = 0.f, float hi = 1.f) {
    return std::uniform_real_distribution<float>(lo, hi)(engine_);
  }
  float normal(float mean = 0.f, float stddev = 1.f) {
    return std::normal_distribution<float>(mean, stddev)(engine_);
  }
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

Generator& default_generator();
void set_seed(uint64_t seed);

}  // namespace kiln
