// The `ferry` binary: one executable, one subcommand per concern.
#include <CLI/CLI.hpp>

#include <iostream>

#include "gateway/cli_commands.h"
#include "gateway/version.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry: one OpenAI-compatible endpoint in front of local and GPU models"};
  app.set_version_flag("--version", std::string("ferry ") + ferry::kVersion);
  app.require_subcommand(1);
  int exit_code = 0;
  ferry::cli::add_serve_command(app, exit_code);
  ferry::cli::add_tokenize_command(app, exit_code);
  ferry::cli::add_model_commands(app, exit_code);
  ferry::cli::add_engine_commands(app, exit_code);
  ferry::cli::add_policy_commands(app, exit_code);
  ferry::cli::add_ledger_commands(app, exit_code);
  ferry::cli::add_keys_commands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
