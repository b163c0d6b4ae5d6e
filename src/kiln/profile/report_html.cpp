#include "kiln/profile/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace kiln::profile {
namespace {

using nlohmann::json;

// One colour per step phase (same order as KILN_FOR_EACH_STEP_PHASE), then "other".
constexpr const char* kPhaseColours[] = {"#e4572e", "#4c78a8", "#72b7b2", "#f2a541",
                                         "#54a24b", "#9d755d", "#b279a2"};
static_assert(std::size(kPhaseColours) == size_t(train::kNumStepPhases));
constexpr const char* kOtherColour = "#bab0ac";

std::string esc(const std::string& s) {
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

std::string fmt(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A power of ten as an axis label: 0.001, 0.1, 10, 1000.
std::string tick(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string mib(double bytes) {
  return fmt(bytes / 1048576.0, 1) + " MiB";
}

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:13px}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}
th{background:#f4f4f4;cursor:pointer;user-select:none}td.n{text-align:right;font-variant-numeric:tabular-nums}
.kv td:first-child{color:#666}.advice li{margin-bottom:.5em}.reason{color:#555;font-size:13px}
.legend span{display:inline-block;margin-right:1em}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
svg.chart{background:#fcfcfc;border:1px solid #eee}pre{background:#f7f7f7;padding:.5em;overflow:auto;max-height:400px;font-size:12px}
.graph{overflow:auto;max-height:700px;border:1px solid #eee}.muted{color:#777}
)";

// Sorts a table.sortable by the clicked column (numbers by data-v, text otherwise).
constexpr const char* kScript = R"(
(function(){
  document.querySelectorAll('table.sortable').forEach(function(table){
    table.querySelectorAll('th').forEach(function(th, column){
      th.addEventListener('click', function(){
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var ascending = th.getAttribute('data-order') !== 'asc';
        th.setAttribute('data-order', ascending ? 'asc' : 'desc');
        rows.sort(function(a, b){
          var x = a.cells[column], y = b.cells[column];
          var nx = parseFloat(x.getAttribute('data-v')), ny = parseFloat(y.getAttribute('data-v'));
          var r = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.textContent.localeCompare(y.textContent);
          return ascending ? r : -r;
        });
        rows.forEach(function(r){ body.appendChild(r); });
      });
    });
  });
  document.body.setAttribute('data-ready', '1');
})();
)";

std::string num_cell(double v, int digits) {
  return "<td class=n data-v=\"" + fmt(v, 6) + "\">" + fmt(v, digits) + "</td>";
}

std::string phase_legend(bool with_other) {
  std::string s = "<div class=legend>";
  for (int p = 0; p < train::kNumStepPhases; ++p) {
    s += "<span><i style=\"background:" + std::string(kPhaseColours[p]) + "\"></i>" +
         esc(std::string(train::step_phase_name(train::StepPhase(p)))) + "</span>";
  }
  if (with_other)
    s += std::string("<span><i style=\"background:") + kOtherColour + "\"></i>other</span>";
  return s + "</div>";
}

// One stacked bar for the mean step and one column per step.
std::string step_section(const ProfileData& data) {
  std::ostringstream s;
  s << "<h2 id=steps>Step time</h2>";
  if (data.steps.empty()) {
    s << "<p class=muted>No training steps were profiled (the profiler saw ops outside "
         "Model.train only).</p><svg class=chart id=chart-steps width=600 height=30><text x=8 "
         "y=20>no steps</text></svg>";
    return s.str();
  }
  const StepRow mean = data.steady_mean();
  s << "<p>Mean of the " << (data.steps.size() > 1 ? data.steps.size() - 1 : 1) << " steady step(s)"
    << (data.steps.size() > 1 ? " (the first left out: compilation, first touch of memory)" : "")
    << ": <b>" << fmt(mean.duration_us / 1000, 3) << " ms</b>, "
    << fmt(data.steady_images_per_s(), 1) << " images/s.</p>";
  s << "<table class=kv><tr><th>phase</th><th>ms</th><th>share</th></tr>";
  for (int p = 0; p < train::kNumStepPhases; ++p) {
    if (mean.phase_us[size_t(p)] <= 0) continue;
    s << "<tr><td>" << esc(std::string(train::step_phase_name(train::StepPhase(p)))) << "</td>"
      << num_cell(mean.phase_us[size_t(p)] / 1000, 3)
      << num_cell(100 * mean.phase_us[size_t(p)] / mean.duration_us, 1) << "</tr>";
  }
  s << "<tr><td>other (between phases)</td>" << num_cell(mean.other_us() / 1000, 3)
    << num_cell(100 * mean.other_us() / mean.duration_us, 1) << "</tr></table>";
  // Columns: one per step (at most 300, evenly sampled).
  const int width = 1000, height = 220, left = 50, bottom = 20;
  const size_t n = data.steps.size();
  const size_t shown = std::min<size_t>(n, 300);
  double longest = 0;
  for (const StepRow& r : data.steps) longest = std::max(longest, r.duration_us);
  // The first step (compilation) would flatten the others: the scale fits the steady ones.
  double scale_max = longest;
  if (n > 1) {
    scale_max = 0;
    for (size_t i = 1; i < n; ++i) scale_max = std::max(scale_max, data.steps[i].duration_us);
  }
  scale_max = std::max(scale_max, 1.0);
  const double column = double(width - left - 10) / double(shown);
  s << "<svg class=chart id=chart-steps width=" << width << " height=" << height + bottom
    << " viewBox=\"0 0 " << width << ' ' << height + bottom << "\">";
  s << "<text x=4 y=14 font-size=11>" << fmt(scale_max / 1000, 2) << " ms</text>"
    << "<line x1=" << left << " y1=" << height << " x2=" << width << " y2=" << height
    << " stroke=#999 />";
  for (size_t k = 0; k < shown; ++k) {
    const StepRow& r = data.steps[k * n / shown];
    double y = height;
    const double x = left + double(k) * column;
    auto bar = [&](double us, const char* colour, const std::string& what) {
      if (us <= 0) return;
      const double h = std::min(us / scale_max * (height - 20), y - 20);
      if (h <= 0) return;
      y -= h;
      s << "<rect x=" << fmt(x, 1) << " y=" << fmt(y, 1)
        << " width=" << fmt(std::max(column - 1, 0.5), 1) << " height=" << fmt(h, 1) << " fill=\""
        << colour << "\"><title>step " << r.global_step << ": " << esc(what) << ' '
        << fmt(us / 1000, 3) << " ms</title></rect>";
    };
    for (int p = 0; p < train::kNumStepPhases; ++p) {
      bar(r.phase_us[size_t(p)], kPhaseColours[p],
          std::string(train::step_phase_name(train::StepPhase(p))));
    }
    bar(std::max(r.other_us(), 0.0), kOtherColour, "other");
  }
  s << "<text x=" << left << " y=" << height + 15 << " font-size=11>step "
    << data.steps.front().global_step << "</text><text x=" << width - 80 << " y=" << height + 15
    << " font-size=11>step " << data.steps.back().global_step << "</text></svg>";
  s << phase_legend(true);
  return s.str();
}

std::string ops_section(const ProfileData& data) {
  std::ostringstream s;
  s << "<h2 id=ops>Top ops</h2><p>" << data.launches << " launches, "
    << fmt(data.op_total_us / 1000, 2)
    << " ms in kernels. Click a column to sort. FLOPs and bytes come from each op's cost in the "
       "op table (fused graph kernels count the op they are built around).</p>";
  s << "<table class=sortable id=top-ops><thead><tr><th>op</th><th>mode</th><th>kernel</th>"
       "<th>shapes (inputs -&gt; outputs)</th><th>calls</th><th>total ms</th><th>share %</th>"
       "<th>mean µs</th><th>GFLOP/s</th><th>GB/s</th></tr></thead><tbody>";
  for (const OpRow& r : data.ops) {
    s << "<tr><td>" << esc(r.name) << "</td><td>" << r.mode << "</td><td>" << esc(r.kernel)
      << "</td><td>" << esc(r.shapes) << "</td>" << num_cell(double(r.calls), 0)
      << num_cell(r.total_us / 1000, 3)
      << num_cell(data.op_total_us > 0 ? 100 * r.total_us / data.op_total_us : 0, 1)
      << num_cell(r.total_us / double(r.calls), 1) << num_cell(r.gflops_per_s(), 2)
      << num_cell(r.gbytes_per_s(), 2) << "</tr>";
  }
  s << "</tbody></table>";
  return s.str();
}

// Achieved GFLOP/s against arithmetic intensity (log-log), one dot per row with counted flops.
std::string rate_section(const ProfileData& data) {
  std::ostringstream s;
  s << "<h2 id=rates>Achieved rates</h2><p>Each dot is one row of the table: its achieved "
       "GFLOP/s against its arithmetic intensity (FLOPs per byte moved). Dots high and to the "
       "right use the cores well; low dots at low intensity are bound by memory.</p>";
  const int width = 700, height = 360, left = 60, bottom = 40;
  s << "<svg class=chart id=chart-rates width=" << width << " height=" << height
    << " viewBox=\"0 0 " << width << ' ' << height << "\">";
  double min_i = 1e30, max_i = 0, min_g = 1e30, max_g = 0;
  for (const OpRow& r : data.ops) {
    if (r.flops <= 0 || r.bytes <= 0 || r.total_us <= 0) continue;
    min_i = std::min(min_i, r.flops / r.bytes);
    max_i = std::max(max_i, r.flops / r.bytes);
    min_g = std::min(min_g, r.gflops_per_s());
    max_g = std::max(max_g, r.gflops_per_s());
  }
  if (max_i <= 0 || max_g <= 0) {
    s << "<text x=10 y=30>no op with counted FLOPs</text></svg>";
    return s.str();
  }
  const double li0 = std::floor(std::log10(min_i)), li1 = std::ceil(std::log10(max_i)) + 1e-9;
  const double lg0 = std::floor(std::log10(std::max(min_g, 1e-3))),
               lg1 = std::ceil(std::log10(max_g)) + 1e-9;
  auto x_of = [&](double i) {
    return left + (std::log10(i) - li0) / std::max(li1 - li0, 1.0) * (width - left - 20);
  };
  auto y_of = [&](double g) {
    return (height - bottom) - (std::log10(std::max(g, 1e-3)) - lg0) / std::max(lg1 - lg0, 1.0) *
                                   (height - bottom - 20);
  };
  s << "<line x1=" << left << " y1=" << height - bottom << " x2=" << width - 10
    << " y2=" << height - bottom << " stroke=#999 /><line x1=" << left << " y1=10 x2=" << left
    << " y2=" << height - bottom << " stroke=#999 />";
  for (double e = li0; e <= li1; e += 1) {
    s << "<text x=" << fmt(x_of(std::pow(10, e)), 1) << " y=" << height - bottom + 14
      << " font-size=10>" << tick(std::pow(10, e)) << "</text>";
  }
  for (double e = lg0; e <= lg1; e += 1) {
    s << "<text x=4 y=" << fmt(y_of(std::pow(10, e)), 1) << " font-size=10>"
      << tick(std::pow(10, e)) << "</text>";
  }
  s << "<text x=" << width / 2 - 60 << " y=" << height - 6
    << " font-size=11>FLOPs per byte</text><text x=4 y=" << 10 << " font-size=11>GFLOP/s</text>";
  const double top = data.ops.empty() ? 1 : data.ops[0].total_us;
  for (const OpRow& r : data.ops) {
    if (r.flops <= 0 || r.bytes <= 0 || r.total_us <= 0) continue;
    const double radius = 2 + 8 * std::sqrt(r.total_us / top);
    s << "<circle cx=" << fmt(x_of(r.flops / r.bytes), 1)
      << " cy=" << fmt(y_of(r.gflops_per_s()), 1) << " r=" << fmt(radius, 1) << " fill=\""
      << (r.mode == "graph" ? "#4c78a8" : "#e4572e") << "\" fill-opacity=0.6><title>" << esc(r.name)
      << ' ' << esc(r.shapes) << ": " << fmt(r.gflops_per_s(), 2) << " GFLOP/s, "
      << fmt(r.gbytes_per_s(), 2) << " GB/s</title></circle>";
  }
  s << "</svg><div class=legend><span><i style=\"background:#e4572e\"></i>eager</span><span><i "
       "style=\"background:#4c78a8\"></i>graph</span> (area: time)</div>";
  return s.str();
}

std::string memory_section(const ProfileData& data) {
  std::ostringstream s;
  const double peak = double(data.profile.value("allocator_peak_bytes", int64_t(0)));
  double arena = 0;
  if (data.compiles() > 0) {
    for (const json& c : data.profile["compiles"]) {
      arena = std::max(arena, c["counts"].value("arena_bytes", 0.0));
    }
  }
  s << "<h2 id=memory>Memory</h2><p>Allocator peak while profiling: <b>" << mib(peak) << "</b>";
  if (arena > 0) s << "; the compiled step's static memory plan: <b>" << mib(arena) << "</b>";
  s << ".</p>";
  const int width = 1000, height = 220, left = 60, bottom = 20;
  s << "<svg class=chart id=chart-memory width=" << width << " height=" << height + bottom
    << " viewBox=\"0 0 " << width << ' ' << height + bottom << "\">";
  double t_end = 1, top = std::max(peak, arena);
  for (const MemoryPoint& m : data.memory) {
    t_end = std::max(t_end, m.at_us);
    top = std::max(top, m.peak_bytes);
  }
  top = std::max(top, 1.0);
  auto x_of = [&](double t) { return left + t / t_end * (width - left - 10); };
  auto y_of = [&](double b) { return height - b / top * (height - 20); };
  s << "<line x1=" << left << " y1=" << height << " x2=" << width << " y2=" << height
    << " stroke=#999 /><text x=4 y=24 font-size=11>" << mib(top) << "</text><text x=" << left
    << " y=" << height + 15 << " font-size=11>0 s</text><text x=" << width - 60
    << " y=" << height + 15 << " font-size=11>" << fmt(t_end / 1e6, 2) << " s</text>";
  s << "<polyline fill=none stroke=#4c78a8 stroke-width=1.5 points=\"";
  double last = 0;
  for (const MemoryPoint& m : data.memory) {
    s << fmt(x_of(m.at_us), 1) << ',' << fmt(y_of(last), 1) << ' ' << fmt(x_of(m.at_us), 1) << ','
      << fmt(y_of(m.in_use_bytes), 1) << ' ';
    last = m.in_use_bytes;
  }
  s << "\"><title>bytes in use</title></polyline>";
  s << "<line x1=" << left << " x2=" << width - 10 << " y1=" << fmt(y_of(peak), 1)
    << " y2=" << fmt(y_of(peak), 1) << " stroke=#e4572e stroke-dasharray=4 ><title>peak "
    << mib(peak) << "</title></line>";
  if (arena > 0) {
    s << "<line x1=" << left << " x2=" << width - 10 << " y1=" << fmt(y_of(arena), 1)
      << " y2=" << fmt(y_of(arena), 1) << " stroke=#54a24b stroke-dasharray=2 ><title>memory plan "
      << mib(arena) << "</title></line>";
  }
  s << "</svg><div class=legend><span><i style=\"background:#4c78a8\"></i>in use</span><span><i "
       "style=\"background:#e4572e\"></i>peak</span>"
    << (arena > 0 ? "<span><i style=\"background:#54a24b\"></i>static plan</span>" : "")
    << "</div>";
  return s.str();
}

std::string pipeline_section(const ProfileData& data) {
  std::ostringstream s;
  s << "<h2 id=pipeline>Data pipeline</h2>";
  if (!data.profile.contains("pipeline") || data.profile["pipeline"].empty()) {
    s << "<p class=muted>No pipeline statistics (no Model.train over a data set).</p>"
         "<svg class=chart id=chart-pipeline width=600 height=30><text x=8 y=20>no pipeline"
         "</text></svg>";
    return s.str();
  }
  const json& stats = data.profile["pipeline"].back()["stats"];
  const double wall = std::max(stats.value("wall_s", 0.0), 1e-9);
  s << "<p>Bottleneck: <b>" << esc(stats.value("bottleneck", "?")) << "</b>. "
    << esc(stats.value("advice", "")) << "</p><p>The consumer (the training loop) waited "
    << fmt(stats.value("consumer_wait_s", 0.0), 3) << " s of " << fmt(wall, 3) << " s for "
    << stats.value("rows_consumed", 0) << " batches.</p>";
  const json& stages = stats.contains("stages") ? stats["stages"] : json::array();
  const int width = 800, row = 26, left = 260;
  const int height = int(stages.size()) * row + 30;
  s << "<svg class=chart id=chart-pipeline width=" << width << " height=" << height
    << " viewBox=\"0 0 " << width << ' ' << height << "\">";
  int y = 10;
  for (const json& st : stages) {
    const int workers = std::max(st.value("workers", 1), 1);
    const double per_thread = wall * workers;
    const double busy = st.value("busy_s", 0.0) / per_thread;
    const double wait_in = st.value("wait_in_s", 0.0) / per_thread;
    const double wait_out = st.value("wait_out_s", 0.0) / per_thread;
    s << "<text x=4 y=" << y + 14 << " font-size=11>" << esc(st.value("name", "?")) << " ×"
      << workers << "</text>";
    double x = left;
    auto bar = [&](double share, const char* colour, const char* what) {
      const double w = std::clamp(share, 0.0, 1.0) * (width - left - 10);
      s << "<rect x=" << fmt(x, 1) << " y=" << y << " width=" << fmt(w, 1) << " height=" << row - 6
        << " fill=\"" << colour << "\"><title>" << what << ' ' << fmt(100 * share, 1)
        << " %</title></rect>";
      x += w;
    };
    bar(busy, "#4c78a8", "busy");
    bar(wait_in, "#f2a541", "waiting for input");
    bar(wait_out, "#bab0ac", "waiting for room downstream");
    y += row;
  }
  s << "</svg><div class=legend><span><i style=\"background:#4c78a8\"></i>busy</span><span><i "
       "style=\"background:#f2a541\"></i>waiting for input</span><span><i "
       "style=\"background:#bab0ac\"></i>waiting for room downstream</span> (share of each "
       "stage's thread time)</div>";
  return s.str();
}

std::string compile_section(const ProfileData& data, const std::string& graph_svg) {
  std::ostringstream s;
  s << "<h2 id=compile>Compilation</h2>";
  if (data.compiles() == 0) {
    s << "<p class=muted>Nothing was compiled (eager mode).</p>";
    return s.str();
  }
  s << "<table id=compiles><tr><th>#</th><th>why</th><th>report</th></tr>";
  for (const json& c : data.profile["compiles"]) {
    s << "<tr><td>" << c.value("compiles", 0) << "</td><td>" << esc(c.value("reason", ""))
      << "</td><td>" << esc(c.value("report", "")) << "</td></tr>";
  }
  s << "</table><p>The last compiled graph (fused nodes list the ops they replaced):</p>";
  if (!graph_svg.empty()) {
    s << "<div class=graph>" << graph_svg << "</div>";
  } else {
    s << "<p class=muted>Graphviz <code>dot</code> is not installed: the graph as text.</p>";
  }
  s << "<details><summary>the graph as text</summary><pre>"
    << esc(data.profile["compiles"].back().value("graph_text", "")) << "</pre></details>";
  return s.str();
}

std::string header_section(const ProfileData& data,
                           const std::vector<Recommendation>& recommendations) {
  std::ostringstream s;
  s << "<h1>Kiln profile</h1><table class=kv>";
  if (data.profile.contains("annotations")) {
    for (const auto& [key, value] : data.profile["annotations"].items()) {
      s << "<tr><td>" << esc(key) << "</td><td>" << esc(value.get<std::string>()) << "</td></tr>";
    }
  }
  s << "<tr><td>profiled</td><td>" << fmt(data.profile.value("duration_us", 0.0) / 1e6, 2) << " s, "
    << data.steps.size() << " steps, " << data.launches << " launches ("
    << (data.graph ? "graph" : "") << (data.graph && data.eager ? " + " : "")
    << (data.eager ? "eager" : "") << ")</td></tr><tr><td>files</td><td>trace.json (open in "
    << "Perfetto or chrome://tracing), ops.csv, steps.csv, profile.json</td></tr></table>";
  s << "<h2 id=advice>Recommendations</h2>";
  if (recommendations.empty()) {
    s << "<p>No bottleneck found by the rules (data wait, recompiles, mode, callbacks, "
         "communication, one dominant op).</p>";
  } else {
    s << "<ul class=advice>";
    for (const Recommendation& r : recommendations) {
      s << "<li><b>" << esc(r.title) << "</b><br><span class=reason>" << esc(r.reason)
        << "</span></li>";
    }
    s << "</ul>";
  }
  return s.str();
}

}  // namespace

std::string render_report_html(const ProfileData& data,
                               const std::vector<Recommendation>& recommendations,
                               const std::string& graph_svg) {
  std::ostringstream s;
  s << "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>Kiln profile</title><style>"
    << kStyle << "</style></head><body>";
  s << header_section(data, recommendations) << step_section(data) << ops_section(data)
    << rate_section(data) << memory_section(data) << pipeline_section(data)
    << compile_section(data, graph_svg);
  s << "<script>" << kScript << "</script></body></html>\n";
  return s.str();
}

}  // namespace kiln::profile
