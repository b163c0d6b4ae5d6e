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

// Parses a command line as app.parse(argc, argv) does (subcommand and option names, counts,
// exclusions, required options, each option's validator) and returns before any command's action
// runs: nothing trains, reads data or starts a job. Throws what parse throws for a bad command
// line. Checks a command makes in its action (train's --config file, tune's --budget,
// plan_launch's rank counts) are not run. The actions stay in place: the options' values live
// in state they own.
void parse_without_running(CLI::App& app, int argc, const char* const* argv);

}  // namespace kiln::cli
