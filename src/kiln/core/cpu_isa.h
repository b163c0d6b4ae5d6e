#pragma once
// Which build of Kiln's own kernels runs on this CPU. The engine is compiled for a baseline x86-64
// level (KILN_BASELINE_ISA, x86-64-v3 unless the build says otherwise); the kernels that gain from
// AVX-512 are compiled a second time for it (core/isa_variant.h) and every call chooses between the
// two from the CPU it runs on, as oneDNN does. A binary built on one machine is then correct and
// fast on another, whatever the build machine had.
#include <string_view>

namespace kiln::cpu {

enum class Isa { baseline, avx512 };

// The variant Kiln's kernels use in this process: AVX-512 where the CPU has AVX512F/BW/VL/DQ and
// this build compiled the AVX-512 variants, unless KILN_MAX_CPU_ISA=baseline caps it (the way
// ONEDNN_MAX_CPU_ISA caps oneDNN: to compare the paths, or test the baseline on a newer CPU).
// Fixed for the life of the process, so a graph planned for one variant runs with it. Throws
// kiln::Error naming the variable when KILN_MAX_CPU_ISA holds anything else.
Isa kernel_isa();

// Whether the CPU itself has AVX-512 (F, BW, VL, DQ), whatever this build compiled.
bool cpu_has_avx512();

// Whether this build compiled the AVX-512 variants (not in a -DKILN_NATIVE=ON build, whose
// baseline is the build machine itself).
bool avx512_variants_built();

std::string_view isa_name(Isa isa);

// The x86-64 level the engine outside the variant kernels was compiled for ("x86-64-v3", or
// "native"), and whether this CPU runs it. Kiln checks this before any other code of the process
// runs and exits with a message naming the level, rather than dying on an illegal instruction.
std::string_view baseline_isa();
bool cpu_runs_baseline();

}  // namespace kiln::cpu
