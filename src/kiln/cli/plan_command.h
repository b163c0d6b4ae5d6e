#pragma once
// `kiln plan --model M --devices N [--memory-limit-mb MB] [--search MODE] ...`: AUTO_PARALLEL's
// plan of a zoo model's training step for N devices (up to 1,024), with no ranks running (the
// search is pure computation): each op's strategy in words, the redistributions rank 0 inserts,
// the parameters' layouts, and the predicted compute, communication and memory per rank per
// step next to plain data parallelism. --json prints the same as one JSON object.
namespace CLI {
class App;
}

namespace kiln::cli {

void add_plan_command(CLI::App& app);

}  // namespace kiln::cli

using kiln::cli::add_plan_command;
