// This machine's peaks: measured figures that make sense, cached per CPU model and thread count
// in Kiln's cache folder, read back without measuring, a damaged cache measured again, and the
// roofline the profiler holds ops against.
#include "kiln/ops/machine_peaks.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kiln/ops/cpu_support.h"

namespace kiln::ops::machine_peaks_test {
namespace {

namespace fs = std::filesystem;

// KILN_CACHE_DIR pointed at a fresh folder for one test, restored after.
class CacheFolder {
 public:
  CacheFolder() : path_(fs::temp_directory_path() / ("kiln-peaks-" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    const char* old = std::getenv("KILN_CACHE_DIR");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("KILN_CACHE_DIR", path_.c_str(), 1);
  }
  ~CacheFolder() {
    if (had_) {
      setenv("KILN_CACHE_DIR", old_.c_str(), 1);
    } else {
      unsetenv("KILN_CACHE_DIR");
    }
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  bool had_ = false;
  std::string old_;
};

TEST(MachinePeaks, MeasuredOncePerThreadCountAndCached) {
  CacheFolder folder;
  EXPECT_EQ(machine_peaks_cache_path(), (folder.path() / "machine_peaks.json").string());
  EXPECT_FALSE(cached_machine_peaks(1).has_value());
  const MachinePeaks p = measure_machine_peaks(1);
  EXPECT_EQ(p.threads, 1);
  EXPECT_FALSE(p.cpu.empty());
  EXPECT_FALSE(p.matmul_kernel.empty());
  EXPECT_EQ(p.source, "measured");
  // Far from any real machine's limits either way: a broken timer or unit would leave them.
  EXPECT_GT(p.f32_gflops, 1.0);
  EXPECT_LT(p.f32_gflops, 1e5);
  EXPECT_GT(p.memory_gbps, 0.5);
  EXPECT_LT(p.memory_gbps, 1e4);
  EXPECT_EQ(p.bf16_gflops > 0, arithmetic_available(DType::bf16));
  ASSERT_TRUE(fs::exists(machine_peaks_cache_path()));

  const std::optional<MachinePeaks> cached = cached_machine_peaks(1);
  ASSERT_TRUE(cached.has_value());
  EXPECT_DOUBLE_EQ(cached->f32_gflops, p.f32_gflops);
  EXPECT_DOUBLE_EQ(cached->memory_gbps, p.memory_gbps);
  EXPECT_EQ(cached->measured_at, p.measured_at);
  EXPECT_EQ(cached->source, machine_peaks_cache_path());
  EXPECT_FALSE(cached_machine_peaks(2).has_value()) << "each thread count has its own entry";
}

TEST(MachinePeaks, DamagedCacheIsMeasuredAgain) {
  CacheFolder folder;
  fs::create_directories(folder.path());
  std::ofstream(machine_peaks_cache_path()) << "{\"format\": \"kiln machine peaks 1\", \"entr";
  // What a measurement killed while writing the cache left: removed at the next write.
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const fs::path killed = folder.path() / (".machine_peaks.json.tmp-" + std::to_string(gone));
  std::ofstream(killed) << "{\"format\"";
  EXPECT_FALSE(cached_machine_peaks(1).has_value());
  measure_machine_peaks(1);
  EXPECT_TRUE(cached_machine_peaks(1).has_value());
  EXPECT_FALSE(fs::exists(killed));
}

TEST(MachinePeaks, RooflineIsTheLowerOfComputeAndBandwidth) {
  MachinePeaks p;
  p.f32_gflops = 100;
  p.bf16_gflops = 400;
  p.memory_gbps = 20;
  EXPECT_DOUBLE_EQ(p.ceiling_gflops(1.0, DType::f32), 20);  // 1 FLOP per byte: 20 GFLOP/s
  EXPECT_DOUBLE_EQ(p.ceiling_gflops(100.0, DType::f32), 100);
  EXPECT_DOUBLE_EQ(p.ceiling_gflops(100.0, DType::bf16), 400);
  EXPECT_TRUE(p.memory_bound(1.0, DType::f32));
  EXPECT_FALSE(p.memory_bound(10.0, DType::f32));
  EXPECT_TRUE(p.memory_bound(10.0, DType::bf16));
  p.bf16_gflops = 0;  // no bf16 arithmetic: bf16 ops are held against fp32's peak
  EXPECT_DOUBLE_EQ(p.compute_gflops(DType::bf16), 100);
}

}  // namespace
}  // namespace kiln::ops::machine_peaks_test
