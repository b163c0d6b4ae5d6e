#pragma once
// Every `kiln` subcommand on one CLI11 app, as the kiln binary has them (cli/main.cpp), and a
// parse-only mode that checks a command line without running it (the argument fuzzer,
// fuzz/cli_args_fuzzer.cpp, and tests/cli/commands_test.cpp).
namespace CLI {
class App;
}

namespace kiln::cli {

// Adds train, info, launch, data, convert, record, eval, predict, export, report, plan, bench
// and tune to `app`, in the order `kiln --help` lists them.
void add_kiln_commands(CLI::App& app);

// Removes the action of `app` and of every subcommand under it: app.parse() then checks the
// arguments (subcommand and option names, counts, exclusions, each option's validator) and stops
// where a command's work would begin. Checks that a command makes in its action (train's --config
// file, tune's --budget, plan_launch's rank counts) are not run.
void remove_command_actions(CLI::App& app);

}  // namespace kiln::cli
