#pragma once
// `kiln convert imagefolder|idx …` and `kiln record info|verify …` (record files, see
// docs/record-format.md). The logic lives in functions so tests can call it without a process.
#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace kiln::cli {

void add_convert_command(CLI::App& app);
void add_record_command(CLI::App& app);

// `kiln record info FILE`: schema, rows, pages and the shard list (missing shards marked).
// Throws kiln::Error when FILE itself cannot be read.
std::string record_info_text(const std::string& file);
std::string record_info_json(const std::string& file);

// `kiln record verify FILE…`: checks every checksum, page, index entry and the set's shards;
// prints a line per problem and a summary. Returns the exit status: 0 whole, 1 damaged.
int run_record_verify(const std::vector<std::string>& files, std::ostream& out, bool quiet = false);

}  // namespace kiln::cli

using kiln::cli::add_convert_command;
using kiln::cli::add_record_command;
