#include "kiln/cli/commands.h"

#include <CLI/CLI.hpp>

#include "kiln/cli/bench_comm_command.h"
#include "kiln/cli/data_command.h"
#include "kiln/cli/eval_command.h"
#include "kiln/cli/export_command.h"
#include "kiln/cli/info_command.h"
#include "kiln/cli/launch_command.h"
#include "kiln/cli/plan_command.h"
#include "kiln/cli/predict_command.h"
#include "kiln/cli/record_command.h"
#include "kiln/cli/report_command.h"
#include "kiln/cli/train_command.h"
#include "kiln/cli/tune_command.h"

namespace kiln::cli {

void add_kiln_commands(CLI::App& app) {
  add_train_command(app);
  add_info_command(app);
  add_launch_command(app);
  add_data_command(app);
  add_convert_command(app);
  add_record_command(app);
  add_eval_command(app);
  add_predict_command(app);
  add_export_command(app);
  add_report_command(app);
  add_plan_command(app);
  add_bench_command(app);
  add_tune_command(app);
}

void parse_without_running(CLI::App& app, int argc, const char* const* argv) {
  // CLI11 runs the root's parse-complete callback after every check and before the callbacks of
  // the subcommands given, which are the commands' actions; it ends the parse there.
  struct ArgumentsChecked {};
  app.parse_complete_callback([] { throw ArgumentsChecked{}; });
  try {
    app.parse(argc, argv);
  } catch (const ArgumentsChecked&) {
  } catch (...) {
    app.parse_complete_callback({});
    throw;
  }
  app.parse_complete_callback({});
}

}  // namespace kiln::cli
