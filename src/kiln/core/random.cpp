#include "kiln/core/random.h"

namespace kiln {

Generator& default_generator() {
  static Generator g;
  return g;
}

void set_seed(uint64_t seed) {
  default_generator().seed(seed);
}

}  // namespace kiln
