#include "kiln/cli/yaml_config.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <set>

#include "kiln/core/error.h"

namespace kiln::cli {

void apply_yaml_config(CLI::App& cmd, const std::string& path, const std::string& command) {
  YAML::Node root;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw FileError(command + ": --config " + path + " is a folder, not a YAML file");
  }
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw FileError(command + ": cannot read config file " + path);
  } catch (const YAML::Exception& e) {
    throw FileError(command + ": " + path + ": line " + std::to_string(e.mark.line + 1) +
                    ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (root.IsNull()) return;
  if (!root.IsMap())
    throw Error(command + ": " + path + " is not a mapping of flag names to values");
  auto where = [&path](const YAML::Node& n) {
    return path + ": line " + std::to_string(n.Mark().line + 1) + ", column " +
           std::to_string(n.Mark().column + 1);
  };
  std::set<std::string> seen;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!it->first.IsScalar() || it->first.Scalar().empty()) {
      throw Error(command + ": " + where(it->first) +
                  ": a key must be a flag name (e.g. batch-size), not empty, null or a list");
    }
    std::string key = it->first.Scalar();
    CLI::Option* opt = nullptr;
    try {
      opt = cmd.get_option("--" + key);
    } catch (const CLI::OptionNotFound&) {
    }
    if (!opt || key == "config" || opt == cmd.get_help_ptr() || opt == cmd.get_help_all_ptr()) {
      throw Error(command + ": " + path + ": unknown key '" + key +
                  "' (keys are the long flag names, e.g. batch-size)");
    }
    if (!seen.insert(key).second) {
      throw Error(command + ": " + where(it->first) + ": key '" + key + "' appears twice");
    }
    if (opt->count() > 0) continue;  // the command line wins
    if (it->second.IsNull() || !it->second.IsDefined()) {
      throw Error(command + ": " + where(it->first) + ": key '" + key +
                  "' has no value (write one, or remove the key)");
    }
    if (!it->second.IsScalar()) {
      throw Error(command + ": " + path + ": key '" + key + "' must have a single value");
    }
    std::string value = it->second.as<std::string>();
    try {
      if (opt->get_type_size() == 0) {  // a flag
        if (value == "true" || value == "on" || value == "1" || value == "yes")
          opt->add_result("true");
        else if (value != "false" && value != "off" && value != "0" && value != "no") {
          throw Error(command + ": " + path + ": key '" + key + "' must be true or false, got '" +
                      value + "'");
        }
      } else {
        opt->add_result(value);
      }
      opt->run_callback();
    } catch (const CLI::ParseError& e) {
      throw Error(command + ": " + path + ": key '" + key + "': " + e.what());
    }
  }
}

}  // namespace kiln::cli
