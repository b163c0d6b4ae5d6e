#include "kiln/cli/launch_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "kiln/core/error.h"
#include "kiln/core/threads.h"

namespace kiln::cli {
namespace {

std::string quoted(const std::string& s) {
  if (!s.empty() && s.find_first_of(" \t\n'\"\\$`*?[]{}()<>|&;!#~") == std::string::npos) return s;
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

}  // namespace

std::string this_kiln_binary() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("kiln: cannot find the kiln binary (/proc/self/exe): " + ec.message());
  return p.string();
}

void exec_launch(LaunchPlan plan, const std::string& who) {
  std::cout << plan.str() << std::endl;
  for (const auto& [name, value] : plan.environment) setenv(name.c_str(), value.c_str(), 1);
  std::vector<char*> argv;
  for (std::string& a : plan.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  throw Error(who + ": cannot run " + plan.argv[0] + ": " + std::strerror(errno) +
              " (install openmpi-bin, or pass --mpirun PATH)");
}

std::string LaunchPlan::str() const {
  std::string s;
  for (const auto& [name, value] : environment) s += name + "=" + quoted(value) + " ";
  for (size_t i = 0; i < argv.size(); ++i) s += (i ? " " : "") + quoted(argv[i]);
  return s;
}

LaunchPlan plan_launch(const LaunchOptions& o, const std::string& kiln_binary) {
  if (o.ranks < 1) {
    throw Error("kiln launch: -n must be at least 1, got " + std::to_string(o.ranks));
  }
  if (o.threads_per_rank < 0) {
    throw Error("kiln launch: --threads-per-rank must be >= 0, got " +
                std::to_string(o.threads_per_rank));
  }
  if (o.command.empty()) {
    throw Error(
        "kiln launch: no command to run; write it after --, e.g. kiln launch -n 2 -- "
        "train --parallel-mode data");
  }
  if (!o.hostfile.empty() && !std::filesystem::is_regular_file(o.hostfile)) {
    throw FileError("kiln launch: --hostfile " + o.hostfile + " is not a readable file");
  }
  LaunchPlan plan;
  const int cores = available_cores();
  const bool one_host = o.hostfile.empty();
  int threads = o.threads_per_rank;
  if (threads == 0) threads = one_host ? std::max(1, cores / o.ranks) : 1;
  const bool oversubscribed = one_host && o.ranks * threads > cores;
  plan.argv = {o.mpirun, "-np", std::to_string(o.ranks)};
  if (!one_host) plan.argv.insert(plan.argv.end(), {"--hostfile", o.hostfile});
  if (oversubscribed) {
    // More ranks than cores: no binding (ranks must be free to share cores).
    plan.argv.insert(plan.argv.end(), {"--oversubscribe", "--bind-to", "none"});
  } else {
    // Each rank bound to its own `threads` cores: its OpenMP pool never fights another rank's.
    plan.argv.insert(plan.argv.end(),
                     {"--map-by", "slot:PE=" + std::to_string(threads), "--bind-to", "core"});
  }
  if (o.tcp) plan.argv.insert(plan.argv.end(), {"--mca", "btl", "tcp,self"});
  // Shared-memory all-reduce is faster here without CMA single-copy; idle ranks yield their core.
  plan.environment = {{"OMPI_MCA_btl_vader_single_copy_mechanism", "none"},
                      {"OMPI_MCA_mpi_yield_when_idle", "1"},
                      {"OMP_NUM_THREADS", std::to_string(threads)}};
  if (geteuid() == 0) {
    plan.environment.push_back({"OMPI_ALLOW_RUN_AS_ROOT", "1"});
    plan.environment.push_back({"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"});
  }
  for (const auto& [name, value] : plan.environment) {
    if (name.rfind("OMPI_ALLOW", 0) == 0) continue;  // read by mpirun itself
    plan.argv.insert(plan.argv.end(), {"-x", name});
  }
  plan.argv.push_back(kiln_binary);
  plan.argv.insert(plan.argv.end(), o.command.begin(), o.command.end());
  return plan;
}

void add_launch_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run a kiln command as an N-rank job under mpirun (kiln launch -n 2 -- train ...)");
  auto o = std::make_shared<LaunchOptions>();
  auto dry_run = std::make_shared<bool>(false);
  cmd->add_option("-n,--ranks", o->ranks, "Number of ranks (processes)")->required();
  cmd->add_option("--hostfile", o->hostfile,
                  "OpenMPI hostfile for a job across hosts: one 'HOST slots=N' line per host");
  cmd->add_flag("--tcp", o->tcp, "Talk over TCP only, as ranks on different hosts do");
  cmd->add_option("--threads-per-rank", o->threads_per_rank,
                  "Kernel threads per rank (default: this host's cores / ranks; 1 with a "
                  "hostfile)");
  cmd->add_option("--mpirun", o->mpirun, "The mpirun to run (default: mpirun from PATH)");
  cmd->add_flag("--dry-run", *dry_run, "Print the mpirun line without running it");
  cmd->add_option("command", o->command, "The kiln command to run on every rank, after --")
      ->expected(-1);
  cmd->callback([o, dry_run] {
    LaunchPlan plan = plan_launch(*o, this_kiln_binary());
    if (*dry_run) {
      std::cout << plan.str() << std::endl;
      return;
    }
    exec_launch(std::move(plan), "kiln launch");
  });
}

}  // namespace kiln::cli
