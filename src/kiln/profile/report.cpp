#include "kiln/profile/report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "kiln/profile/files.h"
#include "kiln/profile/profile_data.h"
#include "kiln/profile/recommendations.h"
#include "kiln/profile/report_html.h"

namespace kiln::profile {
namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string ops_csv(const ProfileData& data) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(3);
  s << "op,mode,kernel,dtype,threads,shapes,layout,calls,total_us,share,mean_us,gflop_per_s,gb_per_"
       "s,"
       "share_of_peak\n";
  for (const OpRow& r : data.ops) {
    s << csv_field(r.name) << ',' << r.mode << ',' << csv_field(r.kernel) << ',' << r.dtype << ','
      << r.threads << ',' << csv_field(r.shapes) << ',' << csv_field(r.layout) << ',' << r.calls
      << ',' << r.total_us << ',' << (data.op_total_us > 0 ? r.total_us / data.op_total_us : 0)
      << ',' << r.total_us / double(r.calls) << ',' << r.gflops_per_s() << ',' << r.gbytes_per_s()
      << ',';
    if (data.peaks && r.flops > 0) s << data.share_of_peak(r);
    s << '\n';
  }
  return s.str();
}

std::string steps_csv(const ProfileData& data) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(3);
  s << "global_step,batch_size,begin_us,duration_us";
  for (int p = 0; p < train::kNumStepPhases; ++p) {
    std::string name(train::step_phase_name(train::StepPhase(p)));
    s << ',' << csv_field(name + " us");
  }
  s << ",other_us\n";
  for (const StepRow& r : data.steps) {
    s << r.global_step << ',' << r.batch_size << ',' << r.begin_us << ',' << r.duration_us;
    for (double us : r.phase_us) s << ',' << us;
    s << ',' << r.other_us() << '\n';
  }
  return s.str();
}

// Graphviz's drawing of the DOT text (kept as DIR/<name>.dot), or "" when there is none or `dot`
// is missing or fails.
std::string render_dot(const std::string& dir, const std::string& dot_text,
                       const std::string& name) {
  if (dot_text.empty()) return "";
  const std::string dot_path = dir + "/" + name + ".dot";
  const std::string svg_path = dir + "/." + name + ".svg.tmp";
  write_file_atomically(dot_path, dot_text);
  const pid_t child = fork();
  if (child < 0) return "";
  if (child == 0) {
    // A large graph may take Graphviz long: a minute at most, then the text form.
    execlp("timeout", "timeout", "60", "dot", "-Tsvg", dot_path.c_str(), "-o", svg_path.c_str(),
           static_cast<char*>(nullptr));
    _exit(127);  // no Graphviz: the report shows the graph as text
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::error_code ec;
    std::filesystem::remove(svg_path, ec);
    return "";
  }
  std::string svg = read_file(svg_path);
  std::error_code ec;
  std::filesystem::remove(svg_path, ec);
  // Inline SVG starts at the <svg> element (no XML prolog or DOCTYPE inside HTML).
  const size_t at = svg.find("<svg");
  return at == std::string::npos ? "" : svg.substr(at);
}

}  // namespace

std::string write_report(const std::string& dir) {
  const ProfileData data = load_profile(dir);
  write_file_atomically(dir + "/ops.csv", ops_csv(data));
  write_file_atomically(dir + "/steps.csv", steps_csv(data));
  GraphDrawings graphs;
  if (data.compiles() > 0) {
    const nlohmann::json& last = data.profile["compiles"].back();
    graphs.traced_svg = render_dot(dir, last.value("traced_graph_dot", ""), "traced_graph");
    graphs.compiled_svg = render_dot(dir, last.value("graph_dot", ""), "compiled_graph");
  }
  const std::string path = dir + "/report.html";
  write_file_atomically(path, render_report_html(data, recommend(data), graphs));
  return path;
}

std::string text_summary(const std::string& dir) {
  const ProfileData data = load_profile(dir);
  const StepRow mean = data.steady_mean();
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(2);
  s << "profile " << dir << ": " << data.steps.size() << " steps, " << data.launches
    << " op launches (" << (data.graph ? "graph" : "") << (data.graph && data.eager ? " + " : "")
    << (data.eager ? "eager" : "") << ")\n";
  if (mean.duration_us > 0) {
    s << "step (mean of the steady steps): " << mean.duration_us / 1000 << " ms, "
      << data.steady_images_per_s() << " images/s\n";
    for (int p = 0; p < train::kNumStepPhases; ++p) {
      if (mean.phase_us[size_t(p)] <= 0) continue;
      s << "  " << train::step_phase_name(train::StepPhase(p)) << ": "
        << mean.phase_us[size_t(p)] / 1000 << " ms ("
        << 100 * mean.phase_us[size_t(p)] / mean.duration_us << " %)\n";
    }
    s << "  other: " << mean.other_us() / 1000 << " ms\n";
  }
  if (data.peaks) {
    s << "machine peaks (" << data.peaks->threads << " threads): fp32 " << data.peaks->f32_gflops
      << " GFLOP/s, bf16 " << data.peaks->bf16_gflops << " GFLOP/s, memory "
      << data.peaks->memory_gbps << " GB/s\n";
  }
  s << "top ops (time, share, GFLOP/s" << (data.peaks ? ", % of peak" : "") << ", kernel):\n";
  for (size_t i = 0; i < data.ops.size() && i < 10; ++i) {
    const OpRow& r = data.ops[i];
    s << "  " << r.total_us / 1000 << " ms  " << 100 * r.total_us / data.op_total_us << " %  "
      << r.gflops_per_s() << "  ";
    if (data.peaks) s << 100 * data.share_of_peak(r) << " %  ";
    s << r.name << " [" << r.kernel << "] " << r.shapes;
    if (!r.layout.empty()) s << " (" << r.layout << ")";
    s << "\n";
  }
  s << "allocator peak: "
    << double(data.profile.value("allocator_peak_bytes", int64_t(0))) / 1048576.0 << " MiB\n";
  const std::vector<Recommendation> advice = recommend(data);
  s << "recommendations:" << (advice.empty() ? " none (no bottleneck found)" : "") << "\n";
  for (const Recommendation& r : advice) s << "  - " << r.title << ": " << r.reason << "\n";
  return s.str();
}

}  // namespace kiln::profile
