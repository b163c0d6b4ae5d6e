#include "kiln/data/stats.h"

#include <algorithm>
#include <cstdio>

namespace kiln::data {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

double pct(double part, double whole) {
  return whole > 0 ? 100.0 * part / whole : 0.0;
}

}  // namespace

double StageStats::busy_fraction(double wall_s) const {
  double cap = wall_s * std::max(1, workers);
  return cap > 0 ? std::min(1.0, busy_s / cap) : 0.0;
}

void diagnose(PipelineStats& s, int cores) {
  s.bottleneck.clear();
  s.advice.clear();
  if (s.stages.empty() || s.wall_s <= 0) return;
  const double consumer_wait = s.consumer_wait_s / s.wall_s;
  if (consumer_wait < 0.10) {
    s.bottleneck = "consumer";
    s.advice = "the pipeline keeps up: the consumer waited only " + num(100 * consumer_wait) +
               "% of the time for data, so the consumer (the training step) sets the pace";
    return;
  }
  const StageStats* worst = &s.stages[0];
  for (auto& st : s.stages) {
    if (st.busy_fraction(s.wall_s) > worst->busy_fraction(s.wall_s)) worst = &st;
  }
  s.bottleneck = worst->name;
  const int busy = int(100 * worst->busy_fraction(s.wall_s) + 0.5);
  std::string head = worst->name + " is busy " + std::to_string(busy) + "% with " +
                     std::to_string(worst->workers) +
                     (worst->workers == 1 ? " worker" : " workers") + ": ";
  const bool cores_left = worst->workers < cores;
  if (busy < 50) {
    s.advice = worst->name + " is the busiest stage at " + std::to_string(busy) +
               "%: no stage is saturated, so the stages wait on each other's hand-offs: raise "
               "prefetch_size (config::set_prefetch_size) or use larger rows per block";
    return;
  }
  if (worst->kind == "map") {
    s.advice = head + (cores_left ? "raise num_parallel_workers (the machine has " +
                                        std::to_string(cores) + " cores)"
                                  : "every core is taken: make the transforms cheaper or do "
                                    "the fixed part (decode, resize) once, offline");
  } else if (worst->kind == "source") {
    s.advice = head + (cores_left ? "raise the source's num_parallel_workers, or pack small "
                                    "files into record files"
                                  : "reading takes every core: pack small files into record files");
  } else if (worst->kind == "batch") {
    s.advice = head + "raise batch's num_parallel_workers";
  } else if (worst->kind == "shuffle") {
    s.advice = head + "lower buffer_size, or shuffle in the source (shuffle=true)";
  } else {
    s.advice = head + "this stage runs on one thread; move its work into a map";
  }
}

std::string PipelineStats::summary() const {
  std::string out;
  char line[256];
  std::snprintf(
      line, sizeof line,
      "data pipeline: %.2f s, %lld rows to the consumer (%.0f/s), consumer waited %.0f%%\n", wall_s,
      static_cast<long long>(rows_consumed), wall_s > 0 ? double(rows_consumed) / wall_s : 0.0,
      pct(consumer_wait_s, wall_s));
  out += line;
  std::snprintf(line, sizeof line, "  %-40s %7s %10s %7s %8s %9s\n", "stage", "workers", "rows",
                "busy%", "wait-in%", "wait-out%");
  out += line;
  for (auto& st : stages) {
    double cap = wall_s * std::max(1, st.workers);
    std::string name = st.name.size() > 40 ? st.name.substr(0, 37) + "..." : st.name;
    std::snprintf(line, sizeof line, "  %-40s %7d %10lld %7.1f %8.1f %9.1f\n", name.c_str(),
                  st.workers, static_cast<long long>(st.rows), pct(st.busy_s, cap),
                  pct(st.wait_in_s, cap), pct(st.wait_out_s, cap));
    out += line;
  }
  if (!bottleneck.empty()) out += "  bottleneck: " + advice + "\n";
  return out;
}

std::string PipelineStats::to_json() const {
  std::string o = "{\"wall_s\":" + num(wall_s) +
                  ",\"rows_consumed\":" + std::to_string(rows_consumed) +
                  ",\"consumer_wait_s\":" + num(consumer_wait_s) + ",\"stages\":[";
  for (size_t i = 0; i < stages.size(); ++i) {
    const auto& st = stages[i];
    o += (i ? "," : "");
    o += "{\"name\":" + json_string(st.name) + ",\"kind\":" + json_string(st.kind) +
         ",\"workers\":" + std::to_string(st.workers) + ",\"rows\":" + std::to_string(st.rows) +
         ",\"blocks\":" + std::to_string(st.blocks) + ",\"busy_s\":" + num(st.busy_s) +
         ",\"wait_in_s\":" + num(st.wait_in_s) + ",\"wait_out_s\":" + num(st.wait_out_s) +
         ",\"busy_fraction\":" + num(st.busy_fraction(wall_s)) +
         ",\"queue_capacity\":" + std::to_string(st.queue_capacity) +
         ",\"queue_blocks\":" + std::to_string(st.queue_blocks) + "}";
  }
  o += "],\"bottleneck\":" + json_string(bottleneck) + ",\"advice\":" + json_string(advice) + "}";
  return o;
}

}  // namespace kiln::data
