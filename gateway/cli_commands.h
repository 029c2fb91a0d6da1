// Registration points for the `ferry` subcommands each module owns. Each function adds its
// subcommands to the app and sets their callbacks; a callback sets `exit_code`.
// Single-threaded: called once from main().
#pragma once

namespace CLI {
class App;
}

namespace ferry::cli {

void add_serve_command(CLI::App& app, int& exit_code);     // gateway/cli_serve.cpp
void add_tokenize_command(CLI::App& app, int& exit_code);  // gateway/cli_tokenize.cpp
void add_model_commands(CLI::App& app, int& exit_code);    // gateway/cli_model.cpp
void add_engine_commands(CLI::App& app, int& exit_code);   // gateway/cli_engine.cpp
void add_policy_commands(CLI::App& app, int& exit_code);   // gateway/cli_policy.cpp
void add_ledger_commands(CLI::App& app, int& exit_code);   // gateway/cli_ledger.cpp
void add_keys_commands(CLI::App& app, int& exit_code);     // gateway/cli_keys.cpp

}  // namespace ferry::cli
