#include "kiln/cli/report_command.h"

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "kiln/core/error.h"
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
    if (!std::filesystem::is_directory(*dir)) {
      throw FileError("kiln report: " + *dir +
                      " is not a folder (give the folder of kiln train --profile DIR)");
    }
    if (*text) {
      std::cout << profile::text_summary(*dir);
    } else {
      std::cout << profile::write_report(*dir) << "\n";
    }
  });
}

}  // namespace kiln::cli
