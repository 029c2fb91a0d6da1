// ferry serve: placeholder until the server lands.
#include <CLI/CLI.hpp>

#include "gateway/cli_commands.h"

namespace ferry::cli {

void add_serve_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("serve", "Run the gateway");
  cmd->callback([&exit_code] { exit_code = 1; });
}

}  // namespace ferry::cli
