// The `kiln` command: subcommands wired with CLI11. Every failure ends as
// "kiln: error: <message>" on stderr with exit status 2, never an uncaught exception.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <new>

#include "kiln/cli/commands.h"
#include "kiln/comm/communicator.h"
#include "kiln/core/cpu_isa.h"
#include "kiln/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: a C++ deep-learning training engine", "kiln"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION);
  try {
    kiln::cli::add_kiln_commands(app);
    kiln::cpu::kernel_isa();  // a bad KILN_MAX_CPU_ISA is an error before any work starts
    if (argc == 1) {
      // Bare `kiln`: the usage, and status 2 as for any other missing argument (docs/errors.md).
      std::cerr << app.help();
      return 2;
    }
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cout.flush();
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 2;
  } catch (const kiln::comm::CollectiveError& e) {
    // Every rank found it together: each says so and the job ends normally.
    std::cout.flush();
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 2;
  } catch (const kiln::Error& e) {
    std::cout.flush();
    // One rank's error ends the whole job (the others may be waiting for it in a collective).
    if (kiln::comm::size() > 1) kiln::comm::abort_job(std::string("error: ") + e.what(), 2);
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    // Sizes read from files and flags are checked before allocating; this is the last guard.
    std::cout.flush();
    const std::string message =
        "out of memory (the job asked for more memory than the machine could give; try a "
        "smaller --batch-size or a smaller model)";
    // The other ranks may be waiting for this one in a collective: end the whole job.
    if (kiln::comm::size() > 1) kiln::comm::abort_job("error: " + message, 2);
    std::cerr << "kiln: error: " << message << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cout.flush();
    if (kiln::comm::size() > 1) kiln::comm::abort_job(std::string("internal: ") + e.what(), 2);
    std::cerr << "kiln: error: internal: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
