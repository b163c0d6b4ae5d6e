#pragma once
// `kiln data bench …`: runs a data pipeline alone, without training, and reports samples/s and the
// per-stage summary (see src/kiln/data/bench.h for the logic).
namespace CLI {
class App;
}

namespace kiln::cli {

// Registers `kiln data bench` (adds to an existing `data` subcommand if there is one).
void add_data_command(CLI::App& app);

}  // namespace kiln::cli

using kiln::cli::add_data_command;
