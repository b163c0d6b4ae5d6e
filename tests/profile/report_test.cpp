// End to end: a short profiled LeNet run in graph mode, its Chrome trace (parses, events nest)
// and its report opened by headless Chromium (no console errors, the top-ops table holds the
// trace's ops, every chart has SVG nodes and every line points, a screenshot next to the report).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kiln/profile/files.h"
#include "kiln/profile/report.h"
#include "profile/profile_testing.h"

namespace kiln::profile::report_test {
namespace {

using nlohmann::json;

struct Span {
  double begin, end;
  std::string name;
};

// Complete events on one thread either hold one another or do not overlap (1 ns of slack for
// the microsecond decimals).
void expect_nested(std::vector<Span> spans, int tid) {
  constexpr double kSlack = 0.001;
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  std::vector<Span> open;
  for (const Span& s : spans) {
    while (!open.empty() && open.back().end <= s.begin + kSlack) open.pop_back();
    if (!open.empty()) {
      ASSERT_LE(s.end, open.back().end + kSlack)
          << "thread " << tid << ": " << s.name << " [" << s.begin << ", " << s.end << "] overlaps "
          << open.back().name << " [" << open.back().begin << ", " << open.back().end
          << "] without nesting";
    }
    open.push_back(s);
  }
}

std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    if (std::system((std::string("command -v ") + name + " >/dev/null 2>&1").c_str()) == 0) {
      return name;
    }
  }
  return "";
}

// Runs headless Chromium on the page with `what` (--dump-dom or --screenshot=...); returns its
// exit status, with stdout and stderr in files.
int run_chromium(const std::string& browser, const std::string& page, const std::string& what,
                 const std::string& out, const std::string& log) {
  const std::string command = "timeout 60 " + browser +
                              " --headless --no-sandbox --disable-gpu --disable-extensions "
                              "--no-first-run --window-size=1280,2400 --enable-logging=stderr "
                              "--v=0 --user-data-dir=" +
                              out + ".profile " + what + " file://" + page + " >" + out + " 2>" +
                              log;
  return std::system(command.c_str());
}

// The <svg class="chart" ...> elements of the page, each with its contents.
std::map<std::string, std::string> charts(const std::string& dom) {
  std::map<std::string, std::string> found;
  for (size_t at = dom.find("<svg class=\"chart\""); at != std::string::npos;
       at = dom.find("<svg class=\"chart\"", at + 1)) {
    const size_t id = dom.find("id=\"", at);
    const std::string name = dom.substr(id + 4, dom.find('"', id + 4) - id - 4);
    found[name] = dom.substr(at, dom.find("</svg>", at) - at);
  }
  return found;
}

// The points="x,y x,y ..." of each <polyline> in `svg`, as the number of points each has.
std::vector<int> polyline_point_counts(const std::string& svg) {
  std::vector<int> counts;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    const size_t end = svg.find('>', at);
    const size_t points = svg.find("points=\"", at);
    if (points == std::string::npos || points > end) {
      counts.push_back(0);
      continue;
    }
    const size_t begin = points + 8;
    std::istringstream list(svg.substr(begin, svg.find('"', begin) - begin));
    int n = 0;
    for (std::string point; list >> point;) n += point.find(',') != std::string::npos;
    counts.push_back(n);
  }
  return counts;
}

TEST(ProfileReport, ProfiledLenetRunOpensInChromium) {
  testing::TempDir dir("kiln-profile-report");
  // This machine's peaks measured into the test's folder, not the user's cache.
  setenv("KILN_CACHE_DIR", (dir.str() + "/cache").c_str(), 1);
  testing::ModeGuard guard(GRAPH_MODE);
  auto model = testing::lenet_model();
  std::string report;
  {
    Profiler profiler({.output_path = dir.str()});
    profiler.annotate("model", "lenet");
    model->train(1, testing::lenet_dataset(80, 16));
    report = profiler.analyse();
  }
  ASSERT_EQ(report, dir.str() + "/report.html");
  for (const char* file : {"trace.json", "profile.json", "ops.csv", "steps.csv", "report.html"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.str() + "/" + file)) << file;
  }

  // The trace parses and its events nest.
  const json trace = json::parse(read_file(dir.str() + "/trace.json"));
  std::map<int, std::vector<Span>> by_thread;
  std::set<std::string> op_names;
  int steps = 0;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const double ts = e.at("ts"), dur = e.at("dur");
    ASSERT_GE(dur, 0);
    by_thread[e.at("tid")].push_back({ts, ts + dur, e.at("name")});
    if (e.at("cat") == "launch" || e.at("cat") == "op") op_names.insert(e.at("name"));
    steps += e.at("cat") == "step";
  }
  EXPECT_EQ(steps, 5);
  ASSERT_FALSE(op_names.empty());
  for (const auto& [tid, spans] : by_thread) expect_nested(spans, tid);

  // Rebuilt from the raw files alone: the same report, and a text summary.
  EXPECT_EQ(write_report(dir.str()), report);
  EXPECT_NE(text_summary(dir.str()).find("top ops"), std::string::npos);

  const std::string browser = chromium();
  if (browser.empty()) {
    GTEST_SKIP() << "chromium is not installed (Debian package chromium): the report was not "
                    "opened in a browser";
  }
  const std::string dom_path = dir.str() + "/dom.html", log_path = dir.str() + "/chromium.log";
  ASSERT_EQ(run_chromium(browser, report, "--dump-dom", dom_path, log_path), 0)
      << read_file(log_path);
  const std::string dom = read_file(dom_path);
  const std::string log = read_file(log_path);
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_EQ(line.find("CONSOLE"), std::string::npos) << "console message: " << line;
    EXPECT_EQ(line.find("Uncaught"), std::string::npos) << line;
  }
  EXPECT_NE(dom.find("data-ready=\"1\""), std::string::npos) << "the page's script did not finish";
  const size_t table = dom.find("id=\"top-ops\"");
  ASSERT_NE(table, std::string::npos);
  const std::string top_ops = dom.substr(table, dom.find("</table>", table) - table);
  for (const std::string& name : op_names) {
    EXPECT_NE(top_ops.find("<td>" + name + "</td>"), std::string::npos) << name;
  }
  // The kernel that ran is in the table for every kind of launch.
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("cat") != "launch") continue;
    const std::string kernel = e.at("args").at("kernel");
    ASSERT_FALSE(kernel.empty());
    EXPECT_NE(top_ops.find("<td class=\"kernel\">" + kernel + "</td>"), std::string::npos)
        << kernel;
  }
  EXPECT_NE(dom.find("id=\"memory-ops\""), std::string::npos) << "the allocating ops' table";
  const auto found = charts(dom);
  // The roofline's ceilings over the rates (the peaks were measured for the report).
  EXPECT_NE(found.at("chart-rates").find("class=\"ceiling\""), std::string::npos);
  // Every chart the page has, those a graph-mode run over a data set always has among them (the
  // pipeline is sampled at the first step and the last, so its series charts are drawn), each
  // with shapes, and every line with points to draw.
  for (const char* id : {"chart-steps", "chart-rates", "chart-memory", "chart-pipeline",
                         "chart-pipeline-busy", "chart-pipeline-queues", "chart-plan"}) {
    EXPECT_TRUE(found.count(id)) << id << " is missing";
  }
  EXPECT_GE(found.size(), 7u);
  for (const auto& [id, svg] : found) {
    const bool drawn = svg.find("<rect") != std::string::npos ||
                       svg.find("<circle") != std::string::npos ||
                       svg.find("<polyline") != std::string::npos;
    EXPECT_TRUE(drawn) << id << " has no shapes: " << svg.substr(0, 300);
    for (int points : polyline_point_counts(svg)) {
      EXPECT_GE(points, 2) << id << " has a line without points to draw: " << svg.substr(0, 600);
    }
  }
  for (const char* id : {"chart-memory", "chart-pipeline-busy", "chart-pipeline-queues"}) {
    EXPECT_FALSE(polyline_point_counts(found.count(id) ? found.at(id) : "").empty())
        << id << " draws no line";
  }
  const std::string png = dir.str() + "/report.png";
  ASSERT_EQ(run_chromium(browser, report, "--screenshot=" + png, dir.str() + "/shot.out", log_path),
            0)
      << read_file(log_path);
  EXPECT_GT(std::filesystem::file_size(png), 10000u);
}

}  // namespace
}  // namespace kiln::profile::report_test
