#include "kiln/cli/report_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/profile/raw_files.h"
#include "kiln/profile/report.h"

namespace kiln::cli {

void add_report_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "report", "Build the report of a profile (kiln train --profile DIR) and print its path");
  auto dir = std::make_shared<std::string>();
  auto text = std::make_shared<bool>(false);
  cmd->add_option("dir", *dir, "The profile's folder")->required();
  cmd->add_flag("--text", *text, "Print the summary in the terminal instead");
  cmd->callback([dir, text] {
    namespace fs = std::filesystem;
    if (!fs::is_directory(*dir)) {
      throw FileError("kiln report: " + *dir +
                      " is not a folder (give the folder of kiln train --profile DIR)");
    }
    // A job under mpirun wrote one folder per rank (DIR/rank0, DIR/rank1, ...).
    std::vector<std::string> folders;
    if (fs::exists(fs::path(*dir) / profile::kTraceFile)) {
      folders.push_back(*dir);
    } else {
      for (const fs::directory_entry& e : fs::directory_iterator(*dir)) {
        const std::string name = e.path().filename().string();
        if (e.is_directory() && name.rfind("rank", 0) == 0 &&
            fs::exists(e.path() / profile::kTraceFile)) {
          folders.push_back(e.path().string());
        }
      }
      std::sort(folders.begin(), folders.end(), [](const std::string& a, const std::string& b) {
        return a.size() != b.size() ? a.size() < b.size() : a < b;  // rank2 before rank10
      });
      if (folders.empty()) {
        throw FileError("kiln report: " + *dir + " holds no " + profile::kTraceFile +
                        " (nor rank folders with one): give the folder of kiln train --profile");
      }
    }
    for (const std::string& folder : folders) {
      if (*text) {
        std::cout << profile::text_summary(folder);
      } else {
        std::cout << profile::write_report(folder) << "\n";
      }
    }
  });
}

}  // namespace kiln::cli
