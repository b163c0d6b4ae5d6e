#include "kiln/profile/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kiln/profile/detail/html.h"

namespace kiln::profile {
namespace {

using html::esc;
using html::fmt;
using html::num_cell;
using nlohmann::json;

// One colour per step phase (same order as KILN_FOR_EACH_STEP_PHASE), then "other".
constexpr const char* kPhaseColours[] = {"#e4572e", "#4c78a8", "#72b7b2", "#f2a541",
                                         "#54a24b", "#9d755d", "#b279a2"};
static_assert(std::size(kPhaseColours) == size_t(train::kNumStepPhases));
constexpr const char* kOtherColour = "#bab0ac";

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1400px;padding:1em 2em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:13px}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}
th{background:#f4f4f4;cursor:pointer;user-select:none}td.n{text-align:right;font-variant-numeric:tabular-nums}
.kv td:first-child{color:#666}.advice li{margin-bottom:.5em}.reason{color:#555;font-size:13px}
.legend span{display:inline-block;margin-right:1em}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
svg.chart{background:#fcfcfc;border:1px solid #eee}pre{background:#f7f7f7;padding:.5em;overflow:auto;max-height:400px;font-size:12px}
.graph{overflow:auto;max-height:700px;border:1px solid #eee}.muted{color:#777}
.verdict{background:#f6f8fb;border-left:4px solid #4c78a8;padding:.5em .8em;margin:.5em 0}
td.kernel{font-family:ui-monospace,monospace;font-size:12px;max-width:16em}
td.shapes{font-size:12px;color:#444;min-width:14em}
td.layout{font-size:12px;color:#444;white-space:nowrap}
#top-ops{font-size:12px}
.scroll{max-height:640px;overflow:auto;border:1px solid #eee}.scroll th{position:sticky;top:0}
nav a{margin-right:1em}
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

// The phases some step spent time in (graph mode's compiled step is split after profiling).
std::string phase_legend(const ProfileData& data, bool with_other) {
  std::string s = "<div class=legend>";
  for (int p = 0; p < train::kNumStepPhases; ++p) {
    const bool seen = std::any_of(data.steps.begin(), data.steps.end(),
                                  [p](const StepRow& r) { return r.phase_us[size_t(p)] > 0; });
    if (!seen) continue;
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
  s << phase_legend(data, true);
  return s.str();
}

std::string ops_section(const ProfileData& data) {
  std::ostringstream s;
  s << "<h2 id=ops>Top ops</h2><p>" << data.launches << " launches, "
    << fmt(data.op_total_us / 1000, 2)
    << " ms in kernels. Click a column to sort. <i>kernel</i> is what ran: oneDNN's "
       "implementation, or Kiln's own (kiln:...). <i>layout</i> is each tensor's memory order in "
       "the shapes' order (nchw, nhwc: channels last; - for a tensor that is not 4-D). FLOPs "
       "and bytes come from each op's cost in "
       "the op table (fused graph kernels count the op they are built around)";
  if (data.peaks) {
    s << "; <i>% of peak</i> is the achieved rate against the roofline's ceiling at the op's "
         "intensity and thread count (<i>bound</i>: the memory bandwidth's or the compute "
         "peak's). Winograd kernels multiply less than the direct convolution the cost counts, "
         "and small tensors stay in the caches: both can show above 100 %";
  }
  s << ".</p>";
  const bool both_modes = data.eager && data.graph;  // else the mode column says nothing
  s << "<div class=scroll><table class=sortable id=top-ops><thead><tr><th>op</th>"
    << (both_modes ? "<th>mode</th>" : "")
    << "<th>kernel</th>"
       "<th>shapes (inputs -&gt; "
       "outputs)</th><th>layout</th><th>threads</th><th>calls</th><th>total ms</th>"
       "<th>share %</th><th>mean µs</th><th>GFLOP/s</th><th>GB/s</th>"
    << (data.peaks ? "<th>% of peak</th><th>bound</th>" : "") << "</tr></thead><tbody>";
  for (const OpRow& r : data.ops) {
    s << "<tr><td>" << esc(r.name) << "</td>"
      << (both_modes ? "<td>" + r.mode + "</td>" : std::string()) << "<td class=kernel>"
      << esc(r.kernel) << "</td><td class=shapes>" << esc(r.shapes) << "</td><td class=layout>"
      << esc(r.layout) << "</td>" << num_cell(double(r.threads), 0) << num_cell(double(r.calls), 0)
      << num_cell(r.total_us / 1000, 3)
      << num_cell(data.op_total_us > 0 ? 100 * r.total_us / data.op_total_us : 0, 1)
      << num_cell(r.total_us / double(r.calls), 1) << num_cell(r.gflops_per_s(), 2)
      << num_cell(r.gbytes_per_s(), 2);
    if (data.peaks) {
      if (r.flops > 0 && r.bytes > 0) {
        const bool memory = data.peaks_for(r.threads)->memory_bound(
            r.flops_per_byte(), r.dtype == "bf16" ? DType::bf16 : DType::f32);
        s << num_cell(100 * data.share_of_peak(r), 1) << "<td>" << (memory ? "memory" : "compute")
          << "</td>";
      } else {
        s << "<td class=n data-v=\"-1\"></td><td></td>";
      }
    }
    s << "</tr>";
  }
  s << "</tbody></table></div>";
  return s.str();
}

// One graph of the compile section: its drawing, or a note that it is text only, and its text.
std::string graph_figure(const std::string& id, const std::string& title, const std::string& svg,
                         const std::string& text) {
  std::ostringstream s;
  s << "<h3 id=" << id << ">" << title << "</h3>";
  if (!svg.empty()) {
    s << "<div class=graph>" << svg << "</div>";
  } else {
    s << "<p class=muted>Graphviz <code>dot</code> is not installed: the graph as text.</p>";
  }
  s << "<details><summary>the graph as text</summary><pre id=" << id << "-text>" << esc(text)
    << "</pre></details>";
  return s.str();
}

std::string compile_section(const ProfileData& data, const GraphDrawings& graphs) {
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
  s << "</table>";
  const json& last = data.profile["compiles"].back();
  const json counts = last.value("counts", json::object());
  const auto nodes = [&](const char* key) {
    return std::to_string(int64_t(counts.value(key, 0.0))) + " nodes";
  };
  const std::string traced = last.value("traced_graph_text", "");
  if (!traced.empty()) {
    s << graph_figure("graph-traced",
                      "The last graph before the passes, as traced (" + nodes("nodes_traced") + ")",
                      graphs.traced_svg, traced);
  }
  s << graph_figure("graph-compiled",
                    "The last graph after the passes, compiled (" + nodes("nodes_compiled") +
                        "; fused nodes list the ops they replaced)",
                    graphs.compiled_svg, last.value("graph_text", ""));
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
    << (data.eager ? "eager" : "") << ")</td></tr>";
  if (data.profile.value("ranks", 1) > 1) {
    s << "<tr><td>rank</td><td>" << data.profile.value("rank", 0) << " of "
      << data.profile.value("ranks", 1) << " (each rank writes its own folder)</td></tr>";
  }
  s << "<tr><td>machine peaks</td><td>";
  if (data.peaks) {
    const ops::MachinePeaks& p = *data.peaks;
    s << esc(p.cpu);
    std::vector<ops::MachinePeaks> all = data.peaks_by_threads;
    if (all.empty()) all.push_back(p);
    for (const ops::MachinePeaks& q : all) {
      s << "<br>" << q.threads << " kernel thread(s): fp32 matmul " << fmt(q.f32_gflops, 1)
        << " GFLOP/s"
        << (q.bf16_gflops > 0 ? ", bf16 " + fmt(q.bf16_gflops, 1) + " GFLOP/s" : std::string())
        << ", memory " << fmt(q.memory_gbps, 1) << " GB/s <span class=muted>(measured "
        << esc(q.measured_at) << " at load " << fmt(q.load_average, 2) << ")</span>";
    }
    s << "<br><span class=muted>kiln info --peaks --remeasure [--threads N] renews them; each "
         "launch is held against the peaks of its own thread count</span>";
  } else {
    s << "<span class=muted>none in this profile: kiln info --peaks measures them</span>";
  }
  s << "</td></tr><tr><td>files</td><td>trace.json (open in Perfetto or chrome://tracing), "
       "ops.csv, steps.csv, profile.json</td></tr></table>";
  s << "<nav><a href=#advice>recommendations</a><a href=#steps>step time</a><a href=#ops>top "
       "ops</a><a href=#rates>rates</a><a href=#memory>memory</a><a href=#pipeline>data "
       "pipeline</a><a href=#compile>compilation</a></nav>";
  s << "<h2 id=advice>Recommendations</h2>";
  if (recommendations.empty()) {
    s << "<p>No bottleneck found by the rules (data wait, recompiles, mode, mixed precision, "
         "fusion, callbacks, communication, one dominant op).</p>";
  } else {
    s << "<ul class=advice>";
    for (const Recommendation& r : recommendations) {
      s << "<li><b>" << esc(r.title) << "</b><br><span class=reason>" << esc(r.reason)
        << "</span></li>";
    }
    s << "</ul>";
  }
  if (data.profile.contains("comparisons") && !data.profile["comparisons"].empty()) {
    double profiled = 0;
    for (const json& t : data.profile["comparisons"]) {
      if (t.value("profiled", false)) profiled = t.value("ms", 0.0);
    }
    s << "<p>The same training step, timed under other settings after the profiled run "
         "(median of interleaved steps on one batch):</p><table class=kv id=comparisons><tr>"
         "<th>setting</th><th>ms per step</th><th>against this run</th></tr>";
    for (const json& t : data.profile["comparisons"]) {
      const double ms = t.value("ms", 0.0);
      s << "<tr><td>" << esc(t.value("setting", "")) << "</td>" << num_cell(ms, 3) << "<td class=n>"
        << (t.value("profiled", false) || ms <= 0 || profiled <= 0 ? std::string("")
            : ms < profiled ? fmt(profiled / ms, 2) + "x faster"
                            : fmt(ms / profiled, 2) + "x slower")
        << "</td></tr>";
    }
    s << "</table>";
  }
  return s.str();
}

}  // namespace

std::string render_report_html(const ProfileData& data,
                               const std::vector<Recommendation>& recommendations,
                               const GraphDrawings& graphs) {
  std::ostringstream s;
  s << "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>Kiln profile</title><style>"
    << kStyle << "</style></head><body>";
  s << header_section(data, recommendations) << step_section(data) << ops_section(data)
    << html::rate_section(data) << html::memory_section(data) << html::pipeline_section(data)
    << compile_section(data, graphs);
  s << "<script>" << kScript << "</script></body></html>\n";
  return s.str();
}

}  // namespace kiln::profile
