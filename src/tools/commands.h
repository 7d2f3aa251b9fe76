// Subcommands of the `weave` CLI. Each Register* adds one CLI11 subcommand whose callback
// stores the process exit code in *exit_code:
//   0 success, 1 invalid input (message on stderr), 2 usage error, 3 numerical mismatch
//   (compare, compile --verify-numerics), 4 a required rewrite did not fire (compile --require),
//   5 numerics not verified (compile --verify-numerics given, but the check could not run).
// Keep README.md's exit code list in step.
#pragma once

#include "CLI/CLI.hpp"

namespace weave::tools {

void RegisterOptCommand(CLI::App& app, int* exit_code);       // opt, verify, stats (cmd_opt.cc)
void RegisterRunCommands(CLI::App& app, int* exit_code);      // run, compare (cmd_run.cc)
void RegisterCompileCommands(CLI::App& app, int* exit_code);  // compile (cmd_compile.cc)
void RegisterDemoCommand(CLI::App& app, int* exit_code);      // demo (cmd_demo.cc)
void RegisterSimulateCommand(CLI::App& app, int* exit_code);  // simulate (cmd_simulate.cc)
void RegisterPartitionCommand(CLI::App& app, int* exit_code); // partition (cmd_partition.cc)

}  // namespace weave::tools
