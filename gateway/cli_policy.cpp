// ferry policy subcommands. Placeholder: filled in by the module's issue.
#include "gateway/cli_commands.h"

namespace ferry::cli {

void add_policy_commands(CLI::App& /*app*/, int& /*exit_code*/) {}

}  // namespace ferry::cli
