#pragma once
// YAML configuration files for CLI11 commands: the keys are the command's long flag names
// (`batch-size: 128`), the values are read as if given on the command line (same conversions
// and checks), and a flag given on the command line wins over the file. Every problem is a
// kiln::Error (FileError for an unreadable or malformed file) naming the file, the line and the
// key: unknown keys, null or non-scalar keys and values, values a flag refuses.
#include <string>

namespace CLI {
class App;
}

namespace kiln::cli {

// Applies the file's keys to `cmd`'s options that the command line did not give. `command`
// starts the error messages ("kiln train").
void apply_yaml_config(CLI::App& cmd, const std::string& path, const std::string& command);

}  // namespace kiln::cli
