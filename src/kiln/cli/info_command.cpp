#include "kiln/cli/info_command.h"

#include <cpuid.h>
#include <jpeglib.h>
#include <omp.h>
#include <png.h>
#include <zlib.h>

#include <oneapi/dnnl/dnnl.h>
#include <yaml-cpp/yaml.h>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "kiln/cli/ops_reference.h"
#include "kiln/cli/option_checks.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/core/error.h"
#include "kiln/core/kernel_threads.h"
#include "kiln/core/threads.h"
#include "kiln/ops/cpu_support.h"
#include "kiln/ops/machine_peaks.h"

namespace kiln::cli {
namespace {

constexpr const char* kKilnVersion = "0.1.0";  // project(kiln VERSION …) in CMakeLists.txt

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = {};
  return r;
}

bool bit(unsigned v, int i) {
  return (v >> i) & 1u;
}

std::string dnnl_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_all:
      return "all";
    default:
      return "unknown (" + std::to_string(int(isa)) + ")";
  }
}

nlohmann::ordered_json collect() {
  CpuFeatures cpu = detect_cpu_features();
  nlohmann::ordered_json j;
  j["kiln"] = kKilnVersion;
  j["cpu"]["vendor"] = cpu.vendor;
  j["cpu"]["brand"] = cpu.brand;
  for (auto& [name, on] : cpu.flags) j["cpu"]["features"][name] = on;
  const dnnl_version_t* v = dnnl_version();
  // Kiln's own kernels: the x86-64 level the engine was compiled for, and the variant its
  // ISA-dispatched kernels run here (core/cpu_isa.h).
  j["kernels"]["baseline"] = std::string(cpu::baseline_isa());
  j["kernels"]["avx512_variants_built"] = cpu::avx512_variants_built();
  j["kernels"]["isa"] = std::string(cpu::isa_name(cpu::kernel_isa()));
  j["onednn"]["version"] =
      std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  j["onednn"]["hash"] = v->hash ? v->hash : "";
  j["onednn"]["cpu_runtime"] = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other";
  j["onednn"]["effective_isa"] = dnnl_isa_name(dnnl_get_effective_cpu_isa());
  const bool bf16_instructions = cpu.has("avx512_bf16");
  const AmpPath path = amp_path(bf16_instructions, cpu.has("amx_bf16"),
                                j["onednn"]["effective_isa"].get<std::string>(),
                                ops::arithmetic_available(DType::bf16));
  j["amp"]["bf16_arithmetic"] = ops::arithmetic_available(DType::bf16);
  j["amp"]["bf16_instructions"] = bf16_instructions;
  j["amp"]["amx"] = cpu.has("amx_bf16");
  j["amp"]["path"] = path.name;
  j["amp"]["description"] = path.description;
  j["threads"]["kernel_threads"] = kiln::num_threads();
  j["threads"]["available_cores"] = kiln::available_cores();
  j["threads"]["omp_max_threads"] = omp_get_max_threads();
  // The fork/join cost the launches' thread choice assumes (core/kernel_threads.h), and what a
  // 2-thread team measures now.
  j["threads"]["fork_join_us_assumed"] = kiln::machine_thread_model().fork_join_seconds * 1e6;
  j["threads"]["fork_join_us_measured"] = kiln::measure_fork_join_seconds(2) * 1e6;
  j["libraries"]["openmp"] = std::to_string(_OPENMP);
  j["libraries"]["cli11"] = CLI11_VERSION;
  j["libraries"]["nlohmann_json"] = std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
                                    std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." +
                                    std::to_string(NLOHMANN_JSON_VERSION_PATCH);
  j["libraries"]["zlib"] = zlibVersion();
  j["libraries"]["libpng"] = png_get_libpng_ver(nullptr);
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
  j["libraries"]["libjpeg_turbo"] = std::to_string(LIBJPEG_TURBO_VERSION_NUMBER / 1000000) + "." +
                                    std::to_string(LIBJPEG_TURBO_VERSION_NUMBER / 1000 % 1000) +
                                    "." + std::to_string(LIBJPEG_TURBO_VERSION_NUMBER % 1000);
#else
  j["libraries"]["libjpeg"] = std::to_string(JPEG_LIB_VERSION);
#endif
  j["libraries"]["compiler"] = __VERSION__;
  return j;
}

void print_text(const nlohmann::ordered_json& j) {
  std::cout << "kiln " << j["kiln"].get<std::string>() << "\n";
  std::cout << "cpu: " << j["cpu"]["brand"].get<std::string>() << " ("
            << j["cpu"]["vendor"].get<std::string>() << ")\n";
  std::cout << "cpu features:";
  for (auto& [name, on] : j["cpu"]["features"].items()) {
    std::cout << ' ' << name << '=' << (on.get<bool>() ? "yes" : "no");
  }
  std::cout << "\n";
  std::cout << "kernels: " << j["kernels"]["isa"].get<std::string>() << " (built for "
            << j["kernels"]["baseline"].get<std::string>()
            << (j["kernels"]["avx512_variants_built"].get<bool>() ? ", with AVX-512 variants" : "")
            << ")\n";
  std::cout << "oneDNN: " << j["onednn"]["version"].get<std::string>() << " (isa "
            << j["onednn"]["effective_isa"].get<std::string>() << ", runtime "
            << j["onednn"]["cpu_runtime"].get<std::string>() << ")\n";
  std::cout << "amp: bf16 arithmetic " << (j["amp"]["bf16_arithmetic"].get<bool>() ? "yes" : "no")
            << ", bf16 instructions (AVX512_BF16) "
            << (j["amp"]["bf16_instructions"].get<bool>() ? "yes" : "no") << ", AMX "
            << (j["amp"]["amx"].get<bool>() ? "yes" : "no") << "; path "
            << j["amp"]["path"].get<std::string>() << ": "
            << j["amp"]["description"].get<std::string>() << "\n";
  std::cout << "threads: " << j["threads"]["kernel_threads"].get<int>() << " kernel threads, "
            << j["threads"]["available_cores"].get<int>() << " available cores\n";
  std::cout << "libraries:";
  for (auto& [name, ver] : j["libraries"].items())
    std::cout << ' ' << name << ' ' << ver.get<std::string>() << ';';
  std::cout << "\n";
}

nlohmann::ordered_json peaks_json(const ops::MachinePeaks& p) {
  nlohmann::ordered_json j;
  j["cpu"] = p.cpu;
  j["threads"] = p.threads;
  j["f32_gflops"] = p.f32_gflops;
  j["bf16_gflops"] = p.bf16_gflops;
  j["memory_gbps"] = p.memory_gbps;
  j["matmul_kernel"] = p.matmul_kernel;
  j["load_average"] = p.load_average;
  j["measured_at"] = p.measured_at;
  j["source"] = p.source;
  return j;
}

void print_peaks(const ops::MachinePeaks& p) {
  std::printf(
      "machine peaks, %d kernel thread(s): fp32 matmul %.1f GFLOP/s (%s), bf16 matmul %s, memory "
      "%.1f GB/s\n  %s at %s, load average %.2f%s\n",
      p.threads, p.f32_gflops, p.matmul_kernel.c_str(),
      p.bf16_gflops > 0 ? (std::to_string(int(p.bf16_gflops + 0.5)) + " GFLOP/s").c_str()
                        : "none (no bf16 arithmetic)",
      p.memory_gbps, p.source == "measured" ? "measured now" : ("cached in " + p.source).c_str(),
      p.measured_at.c_str(), p.load_average,
      p.load_average > 1.0 ? " (other work shared the cores: the figures are low; rerun on an "
                             "idle machine with --remeasure)"
                           : "");
}

}  // namespace

AmpPath amp_path(bool bf16_instructions, bool amx, std::string_view onednn_isa,
                 bool bf16_arithmetic) {
  constexpr const char* kPlacement =
      "O1/O2 put each convolution and matmul in bf16 only where it is faster here, casts "
      "included (timed once per shape at compile time; --amp-strict: MindSpore's placement)";
  if (!bf16_arithmetic) {
    return {"float32", "no bf16 arithmetic on this CPU: O1-O3 train in float32"};
  }
  if (onednn_isa.find("amx") != std::string_view::npos) {
    return {"amx", std::string("bf16 convolutions and matmuls on AMX tiles; ") + kPlacement};
  }
  if (bf16_instructions) {
    return {"avx512_bf16", std::string(amx ? "bf16 dot products on AVX512_BF16, AMX left off "
                                             "(ONEDNN_MAX_CPU_ISA); "
                                           : "bf16 dot products on AVX512_BF16, no AMX; ") +
                               kPlacement};
  }
  return {"avx512_emulated",
          std::string("bf16 converted to fp32 in AVX-512 registers (no bf16 instructions); ") +
              kPlacement};
}

bool CpuFeatures::has(const std::string& flag) const {
  for (auto& [n, on] : flags) {
    if (n == flag) return on;
  }
  return false;
}

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  Regs r0 = cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor, &r0.b, 4);
  std::memcpy(vendor + 4, &r0.d, 4);
  std::memcpy(vendor + 8, &r0.c, 4);
  f.vendor = vendor;
  char brand[49] = {};
  if (cpuid(0x80000000).a >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i) {
      Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
  }
  f.brand = brand;
  while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
  Regs r1 = cpuid(1), r7 = cpuid(7, 0), r7_1 = cpuid(7, 1);
  // AVX state must also be enabled by the OS (XCR0) for AVX/AVX-512 to be usable.
  bool osxsave = bit(r1.c, 27);
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (unsigned long long)hi << 32 | lo;
  }
  bool avx_os = (xcr0 & 0x6) == 0x6;
  bool avx512_os = avx_os && (xcr0 & 0xe0) == 0xe0;
  f.flags = {
      {"sse4_2", bit(r1.c, 20)},
      {"fma", bit(r1.c, 12) && avx_os},
      {"avx", bit(r1.c, 28) && avx_os},
      {"avx2", bit(r7.b, 5) && avx_os},
      {"avx512f", bit(r7.b, 16) && avx512_os},
      {"avx512dq", bit(r7.b, 17) && avx512_os},
      {"avx512bw", bit(r7.b, 30) && avx512_os},
      {"avx512vl", bit(r7.b, 31) && avx512_os},
      {"avx512_vnni", bit(r7.c, 11) && avx512_os},
      {"avx512_bf16", bit(r7_1.a, 5) && avx512_os},
      {"avx512_fp16", bit(r7.d, 23) && avx512_os},
      {"amx_bf16", bit(r7.d, 22)},
  };
  return f;
}

void add_info_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("info", "Show CPU features, oneDNN, threads and libraries");
  auto json = std::make_shared<bool>(false);
  auto ops_table = std::make_shared<bool>(false);
  auto peaks = std::make_shared<bool>(false);
  auto remeasure = std::make_shared<bool>(false);
  auto threads = std::make_shared<int>(0);
  cmd->add_flag("--json", *json, "Print one JSON object");
  cmd->add_flag("--ops", *ops_table,
                "Print the op table as a markdown reference (docs/ops.md is this output)");
  cmd->add_flag("--peaks", *peaks,
                "Also this machine's compute and memory peaks (fp32 and bf16 matmul through "
                "oneDNN, memory bandwidth), measured once per thread count and cached in " +
                    ops::machine_peaks_cache_path());
  cmd->add_flag("--remeasure", *remeasure, "With --peaks: measure again, replacing the cache");
  cmd->add_option("--threads", *threads,
                  "With --peaks: the kernel threads to measure with (default: all available "
                  "cores)")
      ->check(integer_in(0, kMaxThreads));
  cmd->callback([json, ops_table, peaks, remeasure, threads] {
    if (*ops_table) {
      std::cout << ops_reference_markdown();
      return;
    }
    if (*remeasure && !*peaks) throw Error("kiln info: --remeasure needs --peaks");
    if (*threads > 0 && !*peaks) throw Error("kiln info: --threads needs --peaks");
    if (*threads > 0) set_num_threads(*threads);
    nlohmann::ordered_json j = collect();
    std::optional<ops::MachinePeaks> measured;
    if (*peaks) {
      measured = *remeasure ? ops::measure_machine_peaks(num_threads()) : ops::machine_peaks();
      j["peaks"] = peaks_json(*measured);
    }
    if (*json) {
      std::cout << j.dump() << std::endl;
    } else {
      print_text(j);
      if (measured) print_peaks(*measured);
    }
  });
}

}  // namespace kiln::cli
