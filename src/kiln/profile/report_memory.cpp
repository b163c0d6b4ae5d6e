// The report's memory section: the allocator's bytes in use over the run (every allocation and
// release, with the op it happened in and the moment of the peak), the ops that allocate most,
// and a compiled step's static memory plan, each buffer drawn over the time it lives in one
// steady step.
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "kiln/profile/detail/html.h"

namespace kiln::profile::html {
namespace {

using nlohmann::json;

constexpr int kMemoryWidth = 1000, kMemoryHeight = 220, kMemoryLeft = 70, kMemoryBottom = 20;

struct InUse {
  double at_us, bytes;
};

// The bytes in use over time: from the allocator's events when recorded, else the samples.
std::vector<InUse> in_use_series(const ProfileData& data) {
  std::vector<InUse> series;
  if (!data.allocations.empty()) {
    for (const AllocationRow& a : data.allocations) series.push_back({a.at_us, a.in_use_bytes});
  } else {
    for (const MemoryPoint& m : data.memory) series.push_back({m.at_us, m.in_use_bytes});
  }
  return series;
}

// At most two points per pixel column (its lowest and highest), so a run of a million events
// draws as a few thousand points and keeps every peak.
std::string polyline_points(const std::vector<InUse>& series, double t_end, double top) {
  auto x_of = [&](double t) { return kMemoryLeft + t / t_end * (kMemoryWidth - kMemoryLeft - 10); };
  auto y_of = [&](double b) { return kMemoryHeight - b / top * (kMemoryHeight - 20); };
  std::ostringstream s;
  int column = -1;
  double lo = 0, hi = 0, last = 0;
  auto flush = [&] {
    if (column < 0) return;
    s << column << ',' << fmt(y_of(hi), 1) << ' ' << column << ',' << fmt(y_of(lo), 1) << ' ';
  };
  for (const InUse& p : series) {
    const int c = int(x_of(p.at_us));
    if (c != column) {
      flush();
      column = c;
      lo = hi = last;  // the level the column starts at
    }
    lo = std::min(lo, p.bytes);
    hi = std::max(hi, p.bytes);
    last = p.bytes;
  }
  flush();
  if (column >= 0) s << kMemoryWidth - 10 << ',' << fmt(y_of(last), 1);
  return s.str();
}

struct OpAllocations {
  int64_t allocations = 0, releases = 0;
  double allocated = 0, released = 0, largest = 0;
};

std::string allocating_ops_table(const ProfileData& data) {
  std::map<std::string, OpAllocations> by_op;
  for (const AllocationRow& a : data.allocations) {
    OpAllocations& o = by_op[a.op];
    if (a.bytes > 0) {
      ++o.allocations;
      o.allocated += a.bytes;
      o.largest = std::max(o.largest, a.bytes);
    } else {
      ++o.releases;
      o.released -= a.bytes;
    }
  }
  std::vector<std::pair<std::string, OpAllocations>> rows(by_op.begin(), by_op.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.allocated + a.second.released > b.second.allocated + b.second.released;
  });
  std::ostringstream s;
  s << "<table class=sortable id=memory-ops><thead><tr><th>op (where it happened)</th>"
       "<th>allocations</th><th>MiB allocated</th><th>largest MiB</th><th>releases</th>"
       "<th>MiB released</th></tr></thead><tbody>";
  for (size_t i = 0; i < rows.size() && i < 20; ++i) {
    const auto& [op, o] = rows[i];
    s << "<tr><td>" << esc(op) << "</td>" << num_cell(double(o.allocations), 0)
      << num_cell(o.allocated / 1048576.0, 2) << num_cell(o.largest / 1048576.0, 2)
      << num_cell(double(o.releases), 0) << num_cell(o.released / 1048576.0, 2) << "</tr>";
  }
  s << "</tbody></table>";
  return s.str();
}

// The last steady step's launches of graph `id`, as (begin, end) per schedule position: a
// position without a launch of its own (a view) takes its predecessor's end.
bool step_positions(const ProfileData& data, uint64_t id, const json& node_positions,
                    std::vector<std::pair<double, double>>& at, double& step_begin,
                    double& step_end) {
  std::map<int, int> position_of;
  int positions = 0;
  for (const json& np : node_positions) {
    position_of[np[0].get<int>()] = np[1].get<int>();
    positions = std::max(positions, np[1].get<int>() + 1);
  }
  for (auto s = data.steps.rbegin(); s != data.steps.rend(); ++s) {
    const double begin = s->begin_us, end = s->begin_us + s->duration_us;
    at.assign(size_t(positions), {-1, -1});
    bool any = false;
    for (const LaunchSpan& l : data.graph_launches) {
      if (l.graph != id || l.begin_us < begin || l.end_us > end) continue;
      auto p = position_of.find(l.node);
      if (p == position_of.end()) continue;
      at[size_t(p->second)] = {l.begin_us, l.end_us};
      any = true;
    }
    if (!any) continue;
    double previous = at.empty() || at[0].first < 0 ? begin : at[0].first;
    for (auto& [b, e] : at) {
      if (b < 0) b = e = previous;
      previous = e;
    }
    step_begin = begin;
    step_end = end;
    return true;
  }
  return false;
}

std::string plan_chart(const ProfileData& data) {
  if (data.compiles() == 0) return "";
  const json& compile = data.profile["compiles"].back();
  if (!compile.contains("plan") || compile["plan"]["buffers"].empty()) return "";
  const json& buffers = compile["plan"]["buffers"];
  const double arena = compile["counts"].value("arena_bytes", 0.0);
  double top = arena;
  int last_position = 0;
  for (const json& b : buffers) {
    top = std::max(top, b[0].get<double>() + b[1].get<double>());
    last_position = std::max(last_position, b[3].get<int>());
  }
  std::vector<std::pair<double, double>> at;
  double step_begin = 0, step_end = 1;
  const bool timed = step_positions(data, compile.value("graph", uint64_t(0)),
                                    compile["plan"]["node_positions"], at, step_begin, step_end);
  auto time_of = [&](int position, bool end) {
    if (!timed) return double(position + (end ? 1 : 0));
    if (position < 0) return step_begin;
    const size_t p = std::min(size_t(position), at.size() - 1);
    return end ? at[p].second : at[p].first;
  };
  const double x_begin = timed ? step_begin : -1, x_end = timed ? step_end : last_position + 1;
  const int height = 260;
  auto x_of = [&](double t) {
    return kMemoryLeft +
           (t - x_begin) / std::max(x_end - x_begin, 1e-9) * (kMemoryWidth - kMemoryLeft - 10);
  };
  auto y_of = [&](double offset) { return height - offset / std::max(top, 1.0) * (height - 10); };
  std::ostringstream s;
  s << "<p>The compiled step's static memory plan (compile " << compile.value("compiles", 0)
    << "): each of its " << buffers.size()
    << " buffers at its place in the arena (up), over the time it lives ("
    << (timed ? "from its first writer's start to its last reader's end in the last steady step"
              : "in launches, no timed step of this graph")
    << "). Buffers side by side in time share memory.</p>";
  s << "<svg class=chart id=chart-plan width=" << kMemoryWidth
    << " height=" << height + kMemoryBottom << " viewBox=\"0 0 " << kMemoryWidth << ' '
    << height + kMemoryBottom << "\">";
  s << "<text x=4 y=14 font-size=11>" << mib(top) << "</text><text x=4 y=" << height
    << " font-size=11>0</text><line x1=" << kMemoryLeft << " y1=" << height
    << " x2=" << kMemoryWidth << " y2=" << height << " stroke=#999 />";
  static constexpr const char* kColours[] = {"#4c78a8", "#72b7b2", "#54a24b", "#f2a541",
                                             "#e4572e", "#b279a2", "#9d755d"};
  size_t k = 0;
  for (const json& b : buffers) {
    const double offset = b[0], bytes = b[1];
    const int first = b[2], last = b[3];
    const double x0 = x_of(time_of(first, false)), x1 = x_of(time_of(last, true));
    const double y0 = y_of(offset + bytes), y1 = y_of(offset);
    s << "<rect x=" << fmt(x0, 1) << " y=" << fmt(y0, 1)
      << " width=" << fmt(std::max(x1 - x0, 1.0), 1) << " height=" << fmt(std::max(y1 - y0, 0.5), 1)
      << " fill=\"" << kColours[k++ % 7] << "\" fill-opacity=0.75><title>"
      << esc(b[4].get<std::string>()) << ": " << mib(bytes) << " at offset " << mib(offset)
      << ", positions " << first << ".." << last << "</title></rect>";
  }
  s << "<text x=" << kMemoryLeft << " y=" << height + 15 << " font-size=11>"
    << (timed ? "step start" : "launch 0") << "</text><text x=" << kMemoryWidth - 10
    << " y=" << height + 15 << " font-size=11 text-anchor=end>"
    << (timed ? "step end (" + fmt((step_end - step_begin) / 1000, 2) + " ms)"
              : "launch " + std::to_string(last_position))
    << "</text></svg>";
  return s.str();
}

}  // namespace

std::string memory_section(const ProfileData& data) {
  std::ostringstream s;
  const double peak = double(data.profile.value("allocator_peak_bytes", int64_t(0)));
  double arena = 0;
  if (data.compiles() > 0) {
    for (const json& c : data.profile["compiles"]) {
      arena = std::max(arena, c["counts"].value("arena_bytes", 0.0));
    }
  }
  const std::vector<InUse> series = in_use_series(data);
  const AllocationRow* at_peak = nullptr;
  for (const AllocationRow& a : data.allocations) {
    if (!at_peak || a.in_use_bytes > at_peak->in_use_bytes) at_peak = &a;
  }
  s << "<h2 id=memory>Memory</h2><p>Allocator peak while profiling: <b>" << mib(peak) << "</b>";
  if (at_peak) {
    s << ", reached at " << fmt(at_peak->at_us / 1e6, 3) << " s in <b>" << esc(at_peak->op)
      << "</b>";
  }
  if (arena > 0) s << "; the compiled step's static memory plan: <b>" << mib(arena) << "</b>";
  s << ". " << data.allocations.size() << " allocator events"
    << (data.allocations.empty() ? " (recorded only with profile_memory)" : "") << ".</p>";
  s << "<svg class=chart id=chart-memory width=" << kMemoryWidth
    << " height=" << kMemoryHeight + kMemoryBottom << " viewBox=\"0 0 " << kMemoryWidth << ' '
    << kMemoryHeight + kMemoryBottom << "\">";
  double t_end = std::max(data.profile.value("duration_us", 1.0), 1.0), top = std::max(peak, arena);
  for (const InUse& p : series) {
    t_end = std::max(t_end, p.at_us);
    top = std::max(top, p.bytes);
  }
  top = std::max(top, 1.0);
  auto x_of = [&](double t) { return kMemoryLeft + t / t_end * (kMemoryWidth - kMemoryLeft - 10); };
  auto y_of = [&](double b) { return kMemoryHeight - b / top * (kMemoryHeight - 20); };
  s << "<line x1=" << kMemoryLeft << " y1=" << kMemoryHeight << " x2=" << kMemoryWidth
    << " y2=" << kMemoryHeight << " stroke=#999 /><text x=4 y=24 font-size=11>" << mib(top)
    << "</text><text x=" << kMemoryLeft << " y=" << kMemoryHeight + 15
    << " font-size=11>0 s</text><text x=" << kMemoryWidth - 10 << " y=" << kMemoryHeight + 15
    << " font-size=11 text-anchor=end>" << fmt(t_end / 1e6, 2) << " s</text>";
  for (const StepRow& r : data.steps) {  // the steps as light bands behind the line
    s << "<rect x=" << fmt(x_of(r.begin_us), 1) << " y=20 width="
      << fmt(std::max(x_of(r.begin_us + r.duration_us) - x_of(r.begin_us), 0.5), 1)
      << " height=" << kMemoryHeight - 20
      << " fill=#f0f0f0 stroke=#fff stroke-width=0.5><title>step " << r.global_step
      << "</title></rect>";
  }
  s << "<polyline fill=none stroke=#4c78a8 stroke-width=1.5 points=\""
    << polyline_points(series, t_end, top) << "\"><title>bytes in use</title></polyline>";
  s << "<line x1=" << kMemoryLeft << " x2=" << kMemoryWidth - 10 << " y1=" << fmt(y_of(peak), 1)
    << " y2=" << fmt(y_of(peak), 1) << " stroke=#e4572e stroke-dasharray=4 ><title>peak "
    << mib(peak) << "</title></line>";
  if (at_peak) {
    s << "<circle cx=" << fmt(x_of(at_peak->at_us), 1)
      << " cy=" << fmt(y_of(at_peak->in_use_bytes), 1) << " r=4 fill=#e4572e><title>peak "
      << mib(at_peak->in_use_bytes) << " in " << esc(at_peak->op) << "</title></circle>";
  }
  if (arena > 0) {
    s << "<line x1=" << kMemoryLeft << " x2=" << kMemoryWidth - 10 << " y1=" << fmt(y_of(arena), 1)
      << " y2=" << fmt(y_of(arena), 1) << " stroke=#54a24b stroke-dasharray=2 ><title>memory plan "
      << mib(arena) << "</title></line>";
  }
  s << "</svg><div class=legend><span><i style=\"background:#4c78a8\"></i>in use</span><span><i "
       "style=\"background:#e4572e\"></i>peak</span>"
    << (arena > 0 ? "<span><i style=\"background:#54a24b\"></i>static plan's arena</span>" : "")
    << "<span><i style=\"background:#e8e8e8\"></i>steps</span></div>";
  if (!data.allocations.empty()) {
    s << "<p>Where the allocations happen (the op running on that thread at the time; frees "
         "between ops come from tensors going out of scope):</p>"
      << allocating_ops_table(data);
  }
  s << plan_chart(data);
  return s.str();
}

}  // namespace kiln::profile::html
