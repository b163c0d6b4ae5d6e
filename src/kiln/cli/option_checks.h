#pragma once
// Range and finiteness checks for numeric flags, as CLI11 validators. They read the text the user
// gave (on the command line or as a YAML value) before any conversion, so "-1" for an unsigned
// option, "nan" or "inf" never turn silently into a number; the error names the flag and the
// value: "--lr: must be a finite number > 0 and <= 1000, got 'nan'".
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace kiln::cli {

// The most kernel or pipeline threads any --threads / --*-workers option takes.
inline constexpr int64_t kMaxThreads = 4096;

// A decimal integer (no sign for lo >= 0) from lo to hi.
CLI::Validator integer_in(int64_t lo, int64_t hi);
// A decimal integer from 0 to 2^64 - 1 (seeds).
CLI::Validator unsigned_integer();
// A finite number x with lo < x <= hi (lo_inclusive: lo <= x).
CLI::Validator finite_in(double lo, double hi, bool lo_inclusive = false);

}  // namespace kiln::cli
