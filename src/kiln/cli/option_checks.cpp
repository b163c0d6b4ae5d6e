#include "kiln/cli/option_checks.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kiln::cli {
namespace {

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        int64_t v = 0;
        const char* end = s.data() + s.size();
        auto [ptr, ec] = std::from_chars(s.data(), end, v);
        if (s.empty() || ec != std::errc() || ptr != end || v < lo || v > hi) {
          return "must be " + range + ", got '" + s + "'";
        }
        return {};
      },
      "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        const char* end = s.data() + s.size();
        auto [ptr, ec] = std::from_chars(s.data(), end, v);
        if (s.empty() || ec != std::errc() || ptr != end) {
          return "must be an integer from 0 to 18446744073709551615, got '" + s + "'";
        }
        return {};
      },
      "UINT64");
}

CLI::Validator finite_in(double lo, double hi, bool lo_inclusive) {
  std::string range = std::string("a finite number ") + (lo_inclusive ? ">= " : "> ") +
                      number_text(lo) + " and <= " + number_text(hi);
  return CLI::Validator(
      [lo, hi, lo_inclusive, range](std::string& s) -> std::string {
        const char* begin = s.c_str();
        char* end = nullptr;
        double v = s.empty() ? NAN : std::strtod(begin, &end);
        bool above_lo = lo_inclusive ? v >= lo : v > lo;
        if (s.empty() || end != begin + s.size() || !std::isfinite(v) || !above_lo || v > hi) {
          return "must be " + range + ", got '" + s + "'";
        }
        return {};
      },
      std::string("FLOAT in ") + (lo_inclusive ? "[" : "(") + number_text(lo) + ", " +
          number_text(hi) + "]");
}

}  // namespace kiln::cli
