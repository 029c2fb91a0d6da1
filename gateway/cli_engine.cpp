// ferry engine subcommands. Placeholder: filled in by the engine issue.
#include "gateway/cli_commands.h"

namespace ferry::cli {

void add_engine_commands(CLI::App& /*app*/, int& /*exit_code*/) {}

}  // namespace ferry::cli
