#pragma once
// The profiler, with MindSpore's names:
//
//   kiln::Profiler profiler({.output_path = "prof"});
//   model.train(1, ds);
//   profiler.analyse();   // prof/trace.json, profile.json, ops.csv, steps.csv, report.html
//
// While it runs it sees every eager kernel (the dispatch chain's observer) and every launch of a
// compiled graph (graph/launch_observer.h), each with the kernel that ran (ops/kernel_name.h);
// train::Model's step phases, compiled graphs with their memory plans and data pipeline
// statistics (train/step_trace.h); and every allocation and release of the allocator. One
// profiler runs at a time. Under mpirun each rank writes its own folder, <output_path>/rank<N>.
#include <memory>
#include <string>
#include <vector>

#include "kiln/profile/collection.h"

namespace kiln {

struct ProfilerOptions {
  std::string output_path = "./profiler_data";
  // Record every allocation and release of the allocator, with the op it happened in (the
  // memory timeline); the bytes in use at each step's end are always recorded.
  bool profile_memory = true;
  bool start_profile = true;  // start collecting in the constructor (else call start())
  // analyse() shows each op's rate against this machine's peaks (ops/machine_peaks.h): cached,
  // or measured then (about a second; under mpirun only when already cached).
  bool machine_peaks = true;
};

class Profiler {
 public:
  explicit Profiler(ProfilerOptions options = {});
  ~Profiler();  // stops collecting (writes nothing: analyse() does)
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Installs the observers. Throws Error when another profiler is collecting.
  void start();
  void stop();
  // Stops, writes the raw files and builds the report; returns the report's path.
  std::string analyse();
  // A setting of the run shown at the top of the report ("model" = "lenet").
  void annotate(const std::string& key, const std::string& value);
  // The same training step timed under other settings (profile/step_comparison.h): the report's
  // recommendations say what each would gain.
  void add_step_comparison(std::vector<profile::StepTiming> timings);

  const std::string& output_path() const { return output_path_; }
  // What was collected so far (after stop(): all of it).
  const profile::Collection& collection() const;

 private:
  class Collector;
  ProfilerOptions options_;
  std::string output_path_;
  std::unique_ptr<Collector> collector_;
  bool running_ = false;
};

}  // namespace kiln
