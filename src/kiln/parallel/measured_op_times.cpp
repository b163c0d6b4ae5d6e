#include "kiln/parallel/measured_op_times.h"

#include <chrono>
#include <limits>
#include <memory>

#include "kiln/comm/communicator.h"
#include "kiln/core/threads.h"

namespace kiln::parallel {

std::vector<double> MeasuredOpTimes::seconds(const std::vector<autograd::OpTimingQuery>& queries) {
  std::lock_guard lock(mutex_);
  const bool job = comm::initialized() && comm::size() > 1;
  // The rank's own kernel threads: a job's ranks run alike, and rank 0's count is the one timed.
  const int threads = num_threads();
  std::vector<std::string> keys;
  keys.reserve(queries.size());
  for (const autograd::OpTimingQuery& q : queries) {
    keys.push_back(autograd::timing_key(q) + " x" + std::to_string(threads));
  }
  std::vector<double> out(queries.size(), std::numeric_limits<double>::quiet_NaN());
  if (!job || comm::rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < queries.size(); ++i) {
      auto it = cache_.find(keys[i]);
      if (it == cache_.end()) {
        const std::optional<double> ms = autograd::time_op_ms(queries[i], repeats_, threads);
        it = cache_.emplace(keys[i], ms ? *ms * 1e-3 : out[i]).first;
        ++timed_;
      }
      out[i] = it->second;
    }
    timing_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (job && !out.empty()) {
    // The communicator has no f64: the doubles' bytes travel as 64-bit integers, untouched.
    static_assert(sizeof(double) == sizeof(int64_t));
    comm::broadcast(out.data(), int64_t(out.size()), DType::i64, 0);
    for (size_t i = 0; i < queries.size(); ++i) cache_.emplace(keys[i], out[i]);
  }
  return out;
}

int64_t MeasuredOpTimes::timed() const {
  std::lock_guard lock(mutex_);
  return timed_;
}

double MeasuredOpTimes::timing_seconds() const {
  std::lock_guard lock(mutex_);
  return timing_seconds_;
}

std::shared_ptr<MeasuredOpTimes> process_op_times() {
  static const std::shared_ptr<MeasuredOpTimes> times = std::make_shared<MeasuredOpTimes>();
  return times;
}

}  // namespace kiln::parallel
