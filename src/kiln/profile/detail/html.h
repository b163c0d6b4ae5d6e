#pragma once
// Internal to profile/: what the report's sections share (escaping, number formats, table
// cells, the phase colours) and the sections drawn in files of their own.
#include <cstdio>
#include <string>

#include "kiln/profile/profile_data.h"

namespace kiln::profile::html {

inline std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

inline std::string fmt(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A power of ten as an axis label: 0.001, 0.1, 10, 1000.
inline std::string tick(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

inline std::string mib(double bytes) {
  return fmt(bytes / 1048576.0, bytes < 10 * 1048576.0 ? 2 : 1) + " MiB";
}

// A right-aligned number that the sortable tables sort by its exact value.
inline std::string num_cell(double v, int digits) {
  return "<td class=n data-v=\"" + fmt(v, 6) + "\">" + fmt(v, digits) + "</td>";
}

// The sections drawn in files of their own (report_rates.cpp, report_memory.cpp,
// report_pipeline.cpp).
std::string rate_section(const ProfileData& data);
std::string memory_section(const ProfileData& data);
std::string pipeline_section(const ProfileData& data);

}  // namespace kiln::profile::html
