// The multi-rank tests run as one job (ctest starts them under mpirun): every rank runs every
// test, in the same order, so the collectives inside them match.
//
// A test whose ranks stop matching would wait for ever in a collective, and ctest would only end
// it at its timeout with no word of where. A watchdog names the test and the rank that is still in
// it after kTestLimit and ends the whole job.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "kiln/comm/communicator.h"

namespace {

constexpr std::chrono::seconds kTestLimit{120};

class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  Watchdog() : thread_([this] { watch(); }) {}
  ~Watchdog() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  void OnTestStart(const ::testing::TestInfo& test) override {
    std::lock_guard<std::mutex> lock(mutex_);
    current_ = std::string(test.test_suite_name()) + "." + test.name();
    started_ = std::chrono::steady_clock::now();
    ++generation_;
    wake_.notify_all();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard<std::mutex> lock(mutex_);
    current_.clear();
    ++generation_;
    wake_.notify_all();
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!done_) {
      if (current_.empty()) {
        wake_.wait(lock);
        continue;
      }
      const uint64_t seen = generation_;
      if (wake_.wait_until(lock, started_ + kTestLimit,
                           [&] { return done_ || generation_ != seen; })) {
        continue;
      }
      kiln::comm::abort_job("rank " + std::to_string(kiln::comm::rank()) + " is still in " +
                                current_ + " after " + std::to_string(kTestLimit.count()) +
                                " s: its ranks wait on collectives that do not match",
                            1);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::string current_;
  std::chrono::steady_clock::time_point started_;
  uint64_t generation_ = 0;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  kiln::comm::init();
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (kiln::comm::rank() != 0) {
    // One rank's report is enough; a failure on another rank still fails its exit status.
    delete listeners.Release(listeners.default_result_printer());
  }
  listeners.Append(new Watchdog);
  return RUN_ALL_TESTS();
}
