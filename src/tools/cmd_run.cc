// Placeholder until the subcommand lands.
#include "tools/commands.h"

namespace weave::tools {
void RegisterRunCommands(CLI::App& app, int* exit_code) { (void)app; (void)exit_code; }
}  // namespace weave::tools
