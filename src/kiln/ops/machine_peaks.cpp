#include "kiln/ops/machine_peaks.h"

#include <cpuid.h>
#include <omp.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kiln/core/kernel_threads.h"
#include "kiln/core/temporary_files.h"
#include "kiln/core/threads.h"
#include "kiln/ops/cpu_support.h"
#include "kiln/ops/dnnl/context.h"

namespace kiln::ops {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kFormat = "kiln machine peaks 1";
constexpr int64_t kMatmulSize = 1024;
// Long enough to see the best of several runs, short enough that a profiled job does not wait.
constexpr double kTimedSeconds = 0.2;

std::string cpu_model() {
  unsigned r[4] = {};
  if (!__get_cpuid(0x80000000, &r[0], &r[1], &r[2], &r[3]) || r[0] < 0x80000004) {
    return "unknown CPU";
  }
  char brand[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    __get_cpuid(0x80000002 + i, &r[0], &r[1], &r[2], &r[3]);
    std::memcpy(brand + 16 * i, r, 16);
  }
  std::string s(brand);
  s.erase(0, s.find_first_not_of(' '));
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s.empty() ? "unknown CPU" : s;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The fastest of the runs of `body` within kTimedSeconds (at least three, after one warm-up).
template <class Body>
double best_seconds(Body&& body) {
  body();
  double best = 1e300;
  const auto start = Clock::now();
  for (int runs = 0; runs < 3 || seconds_since(start) < kTimedSeconds; ++runs) {
    const auto t0 = Clock::now();
    body();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// GFLOP/s of a square matmul in `dtype` (f32 result), and oneDNN's implementation of it.
std::pair<double, std::string> matmul_gflops(dnnl::memory::data_type dtype, int threads) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  KernelThreads team(threads);  // matmul fixes its team when it is created
  const dnnl::memory::dims square{kMatmulSize, kMatmulSize};
  dnnl::memory::desc src(square, dtype, tag::ab), weights(square, dtype, tag::ab),
      dst(square, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), dnnl_util::engine());
  dnnl::matmul matmul(pd);
  const size_t n = size_t(kMatmulSize * kMatmulSize);
  // Ones in either type (bf16 1.0 is 0x3f80): no denormals, nothing data-dependent.
  std::vector<float> a32, b32, c(n);
  std::vector<uint16_t> a16, b16;
  void* a = nullptr;
  void* b = nullptr;
  if (dtype == dt::f32) {
    a32.assign(n, 1.0f);
    b32.assign(n, 1.0f);
    a = a32.data();
    b = b32.data();
  } else {
    a16.assign(n, 0x3f80);
    b16.assign(n, 0x3f80);
    a = a16.data();
    b = b16.data();
  }
  const dnnl::engine& engine = dnnl_util::engine();
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, dnnl::memory(src, engine, a)},
      {DNNL_ARG_WEIGHTS, dnnl::memory(weights, engine, b)},
      {DNNL_ARG_DST, dnnl::memory(dst, engine, c.data())}};
  dnnl::stream& stream = dnnl_util::stream();
  const double s = best_seconds([&] {
    matmul.execute(stream, args);
    stream.wait();
  });
  const double flops = 2.0 * double(kMatmulSize) * double(kMatmulSize) * double(kMatmulSize);
  return {flops / s / 1e9, pd.impl_info_str()};
}

// GB/s (bytes read + bytes written) of `threads` threads copying a buffer far larger than the
// last-level cache, each its own slice.
double copy_gbps(int threads) {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 <= 0) l3 = 32L << 20;
  const size_t bytes = std::clamp<size_t>(size_t(l3) * 4, size_t(64) << 20, size_t(128) << 20);
  std::vector<char> from(bytes, 1), to(bytes, 0);  // touched here: no page faults while timed
  auto copy = [&] {
#pragma omp parallel num_threads(threads)
    {
      const size_t parts = size_t(omp_get_num_threads()), part = size_t(omp_get_thread_num());
      const size_t begin = bytes * part / parts, end = bytes * (part + 1) / parts;
      std::memcpy(to.data() + begin, from.data() + begin, end - begin);
    }
  };
  const double s = best_seconds(copy);
  return 2.0 * double(bytes) / s / 1e9;
}

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json to_json(const MachinePeaks& p) {
  return {{"cpu", p.cpu},
          {"threads", p.threads},
          {"f32_gflops", p.f32_gflops},
          {"bf16_gflops", p.bf16_gflops},
          {"memory_gbps", p.memory_gbps},
          {"matmul_kernel", p.matmul_kernel},
          {"load_average", p.load_average},
          {"measured_at", p.measured_at}};
}

MachinePeaks from_json(const json& j, const std::string& source) {
  MachinePeaks p;
  p.cpu = j.at("cpu").get<std::string>();
  p.threads = j.at("threads").get<int>();
  p.f32_gflops = j.at("f32_gflops").get<double>();
  p.bf16_gflops = j.at("bf16_gflops").get<double>();
  p.memory_gbps = j.at("memory_gbps").get<double>();
  p.matmul_kernel = j.value("matmul_kernel", "");
  p.load_average = j.value("load_average", 0.0);
  p.measured_at = j.value("measured_at", "");
  p.source = source;
  return p;
}

// The cache's entries; an unreadable or malformed cache reads as empty (it is measured again and
// rewritten), with one line on stderr saying so.
std::vector<json> read_entries(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  try {
    json j = json::parse(in);
    if (j.value("format", "") != kFormat || !j.contains("entries") || !j["entries"].is_array()) {
      throw std::runtime_error("not a '" + std::string(kFormat) + "' file");
    }
    std::vector<json> entries;
    for (const json& e : j["entries"]) {
      from_json(e, path);  // each entry complete, or the file is redone
      entries.push_back(e);
    }
    return entries;
  } catch (const std::exception& e) {
    std::cerr << "kiln: the machine peaks cache " << path << " is unreadable (" << e.what()
              << "); measuring again\n";
    return {};
  }
}

void write_entries(const std::string& path, const std::vector<json>& entries) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  remove_stale_temporaries_of(path);  // left by measurements that were killed
  const std::string temporary = temporary_path(path);
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << json{{"format", kFormat}, {"entries", entries}}.dump(1) << "\n";
    if (!out) {
      std::cerr << "kiln: cannot write the machine peaks cache " << path
                << " (the figures are measured again next time)\n";
      fs::remove(temporary, ec);
      return;
    }
  }
  fs::rename(temporary, path, ec);
  if (ec) fs::remove(temporary, ec);
}

std::mutex& peaks_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

double MachinePeaks::compute_gflops(DType dtype) const {
  const bool low = dtype == DType::bf16 || dtype == DType::f16;
  return low && bf16_gflops > 0 ? bf16_gflops : f32_gflops;
}

double MachinePeaks::ceiling_gflops(double flops_per_byte, DType dtype) const {
  return std::min(compute_gflops(dtype), flops_per_byte * memory_gbps);
}

bool MachinePeaks::memory_bound(double flops_per_byte, DType dtype) const {
  return flops_per_byte * memory_gbps < compute_gflops(dtype);
}

std::string machine_peaks_cache_path() {
  const char* kiln = std::getenv("KILN_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  std::string folder;
  if (kiln && kiln[0] != '\0') {
    folder = kiln;
  } else if (xdg && xdg[0] == '/') {  // the XDG spec ignores a relative path
    folder = std::string(xdg) + "/kiln";
  } else if (const char* home = std::getenv("HOME"); home && home[0] != '\0') {
    folder = std::string(home) + "/.cache/kiln";
  } else {
    folder = "/tmp/kiln-cache-" + std::to_string(getuid());
  }
  return folder + "/machine_peaks.json";
}

std::optional<MachinePeaks> cached_machine_peaks(int threads) {
  const std::string path = machine_peaks_cache_path();
  const std::string cpu = cpu_model();
  std::lock_guard<std::mutex> lock(peaks_mutex());
  for (const json& e : read_entries(path)) {
    if (e["cpu"] == cpu && e["threads"] == threads) return from_json(e, path);
  }
  return std::nullopt;
}

MachinePeaks measure_machine_peaks(int threads) {
  threads = std::max(threads, 1);
  MachinePeaks p;
  p.cpu = cpu_model();
  p.threads = threads;
  double load[1] = {0};
  if (getloadavg(load, 1) == 1) p.load_average = load[0];
  p.measured_at = now_utc();
  std::tie(p.f32_gflops, p.matmul_kernel) = matmul_gflops(dnnl::memory::data_type::f32, threads);
  if (arithmetic_available(DType::bf16)) {
    p.bf16_gflops = matmul_gflops(dnnl::memory::data_type::bf16, threads).first;
  }
  p.memory_gbps = copy_gbps(threads);
  p.source = "measured";
  const std::string path = machine_peaks_cache_path();
  std::lock_guard<std::mutex> lock(peaks_mutex());
  std::vector<json> entries;
  for (json& e : read_entries(path)) {
    if (!(e["cpu"] == p.cpu && e["threads"] == threads)) entries.push_back(std::move(e));
  }
  entries.push_back(to_json(p));
  write_entries(path, entries);
  return p;
}

MachinePeaks machine_peaks(int threads) {
  if (threads <= 0) threads = num_threads();
  static std::mutex memo_mutex;
  static std::map<int, MachinePeaks> memo;
  std::lock_guard<std::mutex> lock(memo_mutex);
  auto it = memo.find(threads);
  if (it != memo.end()) return it->second;
  std::optional<MachinePeaks> cached = cached_machine_peaks(threads);
  MachinePeaks p = cached ? *cached : measure_machine_peaks(threads);
  memo[threads] = p;
  return p;
}

}  // namespace kiln::ops
