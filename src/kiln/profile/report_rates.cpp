// The report's chart of achieved rates: each row of the top-ops table as a dot, GFLOP/s against
// FLOPs per byte (log-log), under this machine's roofline (its compute peaks and its memory
// bandwidth times the intensity) when the profile has the peaks.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "kiln/profile/detail/html.h"

namespace kiln::profile::html {
namespace {

constexpr int kRateWidth = 760, kRateHeight = 380, kRateLeft = 60, kRateBottom = 40, kRateTop = 20,
              kRateRight = 20;

struct Axes {
  double x0, x1, y0, y1;  // log10 ranges
  double x(double intensity) const {
    return kRateLeft +
           (std::log10(intensity) - x0) / (x1 - x0) * (kRateWidth - kRateLeft - kRateRight);
  }
  double y(double gflops) const {
    return (kRateHeight - kRateBottom) - (std::log10(std::max(gflops, 1e-6)) - y0) / (y1 - y0) *
                                             (kRateHeight - kRateBottom - kRateTop);
  }
};

bool plotted(const OpRow& r) {
  return r.flops > 0 && r.bytes > 0 && r.total_us > 0;
}

// One ceiling of the roofline: the bandwidth's slope up to the ridge, then the compute peak.
void ceiling(std::ostringstream& s, const Axes& a, double peak, double bandwidth,
             const char* colour, const std::string& label) {
  const double lo = std::pow(10, a.x0), hi = std::pow(10, a.x1);
  const double ridge = std::clamp(peak / bandwidth, lo, hi);
  const double start = std::max(lo, std::pow(10, a.y0) / bandwidth);
  s << "<polyline class=ceiling fill=none stroke=\"" << colour << "\" stroke-width=1.5 points=\""
    << fmt(a.x(start), 1) << ',' << fmt(a.y(start * bandwidth), 1) << ' ' << fmt(a.x(ridge), 1)
    << ',' << fmt(a.y(std::min(peak, ridge * bandwidth)), 1) << ' ' << fmt(a.x(hi), 1) << ','
    << fmt(a.y(peak), 1) << "\"><title>" << esc(label) << "</title></polyline>";
  s << "<text x=" << fmt(a.x(hi) - 4, 1) << " y=" << fmt(a.y(peak) - 4, 1)
    << " font-size=11 text-anchor=end fill=\"" << colour << "\">" << esc(label) << "</text>";
}

}  // namespace

std::string rate_section(const ProfileData& data) {
  std::ostringstream s;
  s << "<h2 id=rates>Achieved rates</h2><p>Each dot is one row of the top-ops table: its "
       "achieved GFLOP/s against its arithmetic intensity (FLOPs per byte moved), its area its "
       "time.";
  const std::optional<ops::MachinePeaks>& peaks = data.peaks;
  if (peaks) {
    s << " The lines are this machine's roofline at " << peaks->threads
      << " kernel thread(s): no op can sit above the memory bandwidth's slope ("
      << fmt(peaks->memory_gbps, 1) << " GB/s) or the matmul peak (fp32 "
      << fmt(peaks->f32_gflops, 1) << " GFLOP/s"
      << (peaks->bf16_gflops > 0 ? ", bf16 " + fmt(peaks->bf16_gflops, 1) : std::string())
      << "). Dots far below their line leave the most on the table; small tensors that stay in "
         "the caches can sit above the bandwidth's slope, which is main memory's.</p>";
  } else {
    s << " No machine peaks in this profile (<code>kiln info --peaks</code> measures them): "
         "no roofline.</p>";
  }
  s << "<svg class=chart id=chart-rates width=" << kRateWidth << " height=" << kRateHeight
    << " viewBox=\"0 0 " << kRateWidth << ' ' << kRateHeight << "\">";
  double min_i = 1e30, max_i = 0, min_g = 1e30, max_g = 0;
  for (const OpRow& r : data.ops) {
    if (!plotted(r)) continue;
    min_i = std::min(min_i, r.flops_per_byte());
    max_i = std::max(max_i, r.flops_per_byte());
    min_g = std::min(min_g, r.gflops_per_s());
    max_g = std::max(max_g, r.gflops_per_s());
  }
  if (max_i <= 0 || max_g <= 0) {
    s << "<text x=10 y=30>no op with counted FLOPs</text></svg>";
    return s.str();
  }
  if (peaks) {
    const double top = std::max(peaks->f32_gflops, peaks->bf16_gflops);
    max_g = std::max(max_g, top);
    max_i = std::max(max_i, 4 * top / peaks->memory_gbps);  // the ridge well inside the chart
  }
  Axes a{std::floor(std::log10(min_i)), std::ceil(std::log10(max_i)),
         std::floor(std::log10(std::max(min_g, 1e-3))), std::ceil(std::log10(max_g) + 0.05)};
  a.x1 = std::max(a.x1, a.x0 + 1);
  a.y1 = std::max(a.y1, a.y0 + 1);
  s << "<line x1=" << kRateLeft << " y1=" << kRateHeight - kRateBottom
    << " x2=" << kRateWidth - kRateRight << " y2=" << kRateHeight - kRateBottom
    << " stroke=#999 /><line x1=" << kRateLeft << " y1=" << kRateTop << " x2=" << kRateLeft
    << " y2=" << kRateHeight - kRateBottom << " stroke=#999 />";
  for (double e = a.x0; e <= a.x1 + 1e-9; e += 1) {
    s << "<text x=" << fmt(a.x(std::pow(10, e)), 1) << " y=" << kRateHeight - kRateBottom + 14
      << " font-size=10 text-anchor=middle>" << tick(std::pow(10, e)) << "</text>";
  }
  for (double e = a.y0; e <= a.y1 + 1e-9; e += 1) {
    s << "<text x=" << kRateLeft - 4 << " y=" << fmt(a.y(std::pow(10, e)) + 3, 1)
      << " font-size=10 text-anchor=end>" << tick(std::pow(10, e)) << "</text>";
  }
  s << "<text x=" << (kRateWidth + kRateLeft) / 2 << " y=" << kRateHeight - 8
    << " font-size=11 text-anchor=middle>FLOPs per byte</text><text x=4 y=12 "
       "font-size=11>GFLOP/s</text>";
  if (peaks) {
    ceiling(s, a, peaks->f32_gflops, peaks->memory_gbps, "#555",
            "fp32 " + fmt(peaks->f32_gflops, 0) + " GFLOP/s");
    if (peaks->bf16_gflops > peaks->f32_gflops * 1.05) {
      ceiling(s, a, peaks->bf16_gflops, peaks->memory_gbps, "#b279a2",
              "bf16 " + fmt(peaks->bf16_gflops, 0) + " GFLOP/s");
    }
  }
  const double longest = data.ops.empty() ? 1 : data.ops[0].total_us;
  for (const OpRow& r : data.ops) {
    if (!plotted(r)) continue;
    const double radius = 2 + 8 * std::sqrt(r.total_us / longest);
    s << "<circle cx=" << fmt(a.x(r.flops_per_byte()), 1) << " cy=" << fmt(a.y(r.gflops_per_s()), 1)
      << " r=" << fmt(radius, 1) << " fill=\"" << (r.mode == "graph" ? "#4c78a8" : "#e4572e")
      << "\" fill-opacity=0.6><title>" << esc(r.name) << ' ' << esc(r.shapes) << " ["
      << esc(r.kernel) << "]: " << fmt(r.gflops_per_s(), 2) << " GFLOP/s, "
      << fmt(r.gbytes_per_s(), 2) << " GB/s";
    if (peaks) s << ", " << fmt(100 * data.share_of_peak(r), 1) << " % of its ceiling";
    s << "</title></circle>";
  }
  s << "</svg><div class=legend>"
    << (data.eager ? "<span><i style=\"background:#e4572e\"></i>eager</span>" : "")
    << (data.graph ? "<span><i style=\"background:#4c78a8\"></i>graph</span>" : "")
    << (peaks ? "<span><i style=\"background:#555\"></i>roofline (fp32)</span>" : "")
    << (peaks && peaks->bf16_gflops > peaks->f32_gflops * 1.05
            ? "<span><i style=\"background:#b279a2\"></i>roofline (bf16)</span>"
            : "")
    << "</div>";
  return s.str();
}

}  // namespace kiln::profile::html
