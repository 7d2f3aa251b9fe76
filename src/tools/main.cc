// The `weave` command-line tool: one binary with subcommands (see commands.h).
#include <iostream>

#include "CLI/CLI.hpp"
#include "eval/blas_threads.h"
#include "tools/commands.h"
#include "tools/huge_page_heap.h"

int main(int argc, char** argv) {
  weave::eval::StopIdleBlasThreads();  // most commands never multiply
  weave::tools::UseHugePageHeap();     // before the heap grows: see huge_page_heap.h
  CLI::App app{"weave: windowed einsum and FP8 GEMM rewrites for XLA HLO modules"};
  app.require_subcommand(1);
  int exit_code = 0;
  weave::tools::RegisterOptCommand(app, &exit_code);
  weave::tools::RegisterRunCommands(app, &exit_code);
  weave::tools::RegisterCompileCommands(app, &exit_code);
  weave::tools::RegisterDemoCommand(app, &exit_code);
  weave::tools::RegisterSimulateCommand(app, &exit_code);
  weave::tools::RegisterPartitionCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;  // usage errors exit 2
  }
  return exit_code;
}
