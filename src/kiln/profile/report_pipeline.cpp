// The report's data pipeline section: diagnose()'s verdict and its fix, each stage's busy and
// waiting shares over the whole run, and over time (between the samples the training loop took
// every few steps) its busy share and its output queue's depth.
#include <algorithm>
#include <sstream>

#include "kiln/profile/detail/html.h"

namespace kiln::profile::html {
namespace {

using nlohmann::json;

constexpr const char* kStageColours[] = {"#4c78a8", "#f2a541", "#54a24b", "#e4572e",
                                         "#72b7b2", "#b279a2", "#9d755d", "#bab0ac"};

std::string stage_colour(size_t i) {
  return kStageColours[i % std::size(kStageColours)];
}

std::string totals_chart(const json& stats) {
  std::ostringstream s;
  const double wall = std::max(stats.value("wall_s", 0.0), 1e-9);
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
    std::string name = st.value("name", "?");
    if (name.size() > 36) name = name.substr(0, 33) + "...";
    s << "<text x=4 y=" << y + 14 << " font-size=11><title>" << esc(st.value("name", "?"))
      << "</title>" << esc(name) << " ×" << workers << "</text>";
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
       "stage's thread time over the run)</div>";
  return s.str();
}

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (seconds since the start, value)
};

// Lines over time, one per series, values from 0 to `top` (`unit` on the axis).
std::string line_chart(const std::string& id, const std::vector<Series>& series, double t_end,
                       double top, const std::string& unit) {
  const int width = 1000, height = 180, left = 60, bottom = 20;
  std::ostringstream s;
  s << "<svg class=chart id=" << id << " width=" << width << " height=" << height + bottom
    << " viewBox=\"0 0 " << width << ' ' << height + bottom << "\">";
  auto x_of = [&](double t) { return left + t / std::max(t_end, 1e-9) * (width - left - 10); };
  auto y_of = [&](double v) { return height - v / std::max(top, 1e-9) * (height - 20); };
  s << "<line x1=" << left << " y1=" << height << " x2=" << width << " y2=" << height
    << " stroke=#999 /><text x=4 y=24 font-size=11>" << esc(unit) << "</text><text x=4 y=" << height
    << " font-size=11>0</text><text x=" << left << " y=" << height + 15
    << " font-size=11>0 s</text><text x=" << width - 10 << " y=" << height + 15
    << " font-size=11 text-anchor=end>" << fmt(t_end, 2) << " s</text>";
  for (size_t i = 0; i < series.size(); ++i) {
    s << "<polyline fill=none stroke=\"" << stage_colour(i) << "\" stroke-width=1.5 points=\"";
    for (const auto& [t, v] : series[i].points) {
      s << fmt(x_of(t), 1) << ',' << fmt(y_of(std::clamp(v, 0.0, top)), 1) << ' ';
    }
    s << "\"><title>" << esc(series[i].name) << "</title></polyline>";
  }
  s << "</svg><div class=legend>";
  for (size_t i = 0; i < series.size(); ++i) {
    std::string name = series[i].name;
    if (name.size() > 40) name = name.substr(0, 37) + "...";
    s << "<span><i style=\"background:" << stage_colour(i) << "\"></i>" << esc(name) << "</span>";
  }
  s << "</div>";
  return s.str();
}

// Per stage, its busy share between consecutive samples and its queue at each sample; the
// training loop's share of time waiting for data.
std::string series_charts(const json& samples) {
  std::vector<Series> busy, queues;
  Series consumer{"training loop waiting for data", {}};
  const json* previous = nullptr;
  double t_end = 0;
  for (const json& sample : samples) {
    const json& stats = sample["stats"];
    if (!stats.contains("stages")) continue;
    const json& stages = stats["stages"];
    const double t = sample.value("at_us", 0.0) / 1e6;
    t_end = std::max(t_end, t);
    if (busy.empty()) {
      for (const json& st : stages) {
        busy.push_back({st.value("name", "?"), {}});
        queues.push_back(
            {st.value("name", "?") + " (of " + std::to_string(st.value("queue_capacity", 0)) + ")",
             {}});
      }
    }
    const json& before = previous ? (*previous)["stats"] : json::object();
    const double wall = stats.value("wall_s", 0.0) - before.value("wall_s", 0.0);
    if (wall > 0 && stages.size() == busy.size()) {
      for (size_t i = 0; i < stages.size(); ++i) {
        const json& st = stages[i];
        const double was = before.contains("stages") && i < before["stages"].size()
                               ? before["stages"][i].value("busy_s", 0.0)
                               : 0.0;
        const double threads = wall * std::max(st.value("workers", 1), 1);
        busy[i].points.emplace_back(t, (st.value("busy_s", 0.0) - was) / threads);
        queues[i].points.emplace_back(t, st.value("queue_blocks", 0));
      }
      consumer.points.emplace_back(
          t, (stats.value("consumer_wait_s", 0.0) - before.value("consumer_wait_s", 0.0)) / wall);
    }
    previous = &sample;
  }
  if (consumer.points.size() < 2) {
    return "<p class=muted>Too few pipeline samples for a time series (one is taken every "
           "20 ms of training).</p>";
  }
  int deepest = 1;
  for (const json& sample : samples) {
    const json& stats = sample["stats"];
    if (!stats.contains("stages")) continue;
    for (const json& st : stats["stages"]) {
      deepest = std::max(deepest, st.value("queue_capacity", 1));
    }
  }
  busy.push_back(std::move(consumer));
  std::ostringstream s;
  s << "<p>Over time: each stage's busy share of its threads' time between two samples, and "
       "the share of that time the training loop waited for data.</p>"
    << line_chart("chart-pipeline-busy", busy, t_end, 1.0, "100 %")
    << "<p>Blocks waiting in each stage's output queue (a full queue: the stages after it are "
       "slower; an empty one: it is the slow one).</p>"
    << line_chart("chart-pipeline-queues", queues, t_end, double(deepest),
                  std::to_string(deepest) + " blocks");
  return s.str();
}

}  // namespace

std::string pipeline_section(const ProfileData& data) {
  std::ostringstream s;
  s << "<h2 id=pipeline>Data pipeline</h2>";
  if (!data.profile.contains("pipeline") || data.profile["pipeline"].empty()) {
    s << "<p class=muted>No pipeline statistics (no Model.train over a data set).</p>"
         "<svg class=chart id=chart-pipeline width=600 height=30><text x=8 y=20>no pipeline"
         "</text></svg>";
    return s.str();
  }
  const json& samples = data.profile["pipeline"];
  const json& stats = samples.back()["stats"];
  const double wall = std::max(stats.value("wall_s", 0.0), 1e-9);
  const std::string bottleneck = stats.value("bottleneck", "?");
  s << "<div class=verdict><b>diagnose(): "
    << (bottleneck == "consumer" ? std::string("the training step sets the pace")
                                 : "the bottleneck is " + esc(bottleneck))
    << "</b><br>" << esc(stats.value("advice", "")) << "</div><p>The training loop waited "
    << fmt(stats.value("consumer_wait_s", 0.0), 3) << " s of " << fmt(wall, 3) << " s for "
    << stats.value("rows_consumed", 0) << " batches.</p>";
  s << totals_chart(stats) << series_charts(samples);
  return s.str();
}

}  // namespace kiln::profile::html
