#pragma once
// Runs the built `kiln` executable as a user would, for the tests of the command line.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace kiln::testing {

struct CommandResult {
  bool exited = false;  // false: killed by a signal (or no executable to run)
  int status = -1;      // the exit status when it exited
  std::string output;   // stdout and stderr
};

inline std::string kiln_exe() {
  return std::string(KILN_BINARY_DIR) + "/src/kiln/kiln";
}

// `env` is prepended to the command line (e.g. "OMP_NUM_THREADS=1 ").
inline CommandResult run_kiln(const std::string& args, const std::string& env = "") {
  const std::string exe = kiln_exe();
  if (!std::filesystem::exists(exe)) {
    return {false, -1, "missing " + exe + " (build target kiln_cli_main)"};
  }
  FILE* p = ::popen((env + exe + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return {WIFEXITED(status), WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace kiln::testing
