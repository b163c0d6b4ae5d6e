#pragma once
// `kiln launch -n N [--hostfile F] [--tcp] [--threads-per-rank T] [--dry-run] -- train ...`:
// runs a Kiln command as an N-rank job under OpenMPI's mpirun, with the settings these machines
// need (shared-memory transport without single-copy, one kernel thread pool per rank sized
// cores / ranks and bound to its cores, root allowed where it runs as root), and prints the
// mpirun line it runs.
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace kiln::cli {

struct LaunchOptions {
  int ranks = 2;
  std::string hostfile;      // multi-host: OpenMPI's hostfile ("host slots=N" per line)
  bool tcp = false;          // talk over TCP only (as across hosts), even on one host
  int threads_per_rank = 0;  // 0: this host's cores / ranks (1 with a hostfile)
  std::string mpirun = "mpirun";
  std::vector<std::string> command;  // the kiln subcommand and its arguments
};

// The mpirun argument list (argv[0] is mpirun) and the environment settings it adds.
struct LaunchPlan {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> environment;
  std::string str() const;  // the shell line, environment first
};
LaunchPlan plan_launch(const LaunchOptions& options, const std::string& kiln_binary);
// Prints the plan's mpirun line and replaces this process by it; `who` ("kiln launch") names the
// command in the error thrown when mpirun cannot be run.
[[noreturn]] void exec_launch(LaunchPlan plan, const std::string& who);
// This process's own executable (for running itself under mpirun).
std::string this_kiln_binary();

void add_launch_command(CLI::App& app);

}  // namespace kiln::cli

using kiln::cli::add_launch_command;
