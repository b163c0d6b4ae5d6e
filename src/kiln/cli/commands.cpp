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

void remove_command_actions(CLI::App& app) {
  app.final_callback({});
  app.parse_complete_callback({});
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    remove_command_actions(*sub);
  }
}

}  // namespace kiln::cli
