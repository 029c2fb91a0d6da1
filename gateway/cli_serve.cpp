// ferry serve: load and validate the config, bind, announce, serve until SIGTERM/SIGINT.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>

#include "config/config.h"
#include "gateway/cli_commands.h"
#include "gateway/server.h"

namespace ferry::cli {

namespace {

struct ServeOptions {
  std::string config_path;
  std::string listen;
};

int serve(const ServeOptions& opts) {
  std::signal(SIGPIPE, SIG_IGN);
  auto cfg = opts.config_path.empty()
                 ? config::load_config_text(config::default_config_text(), "<embedded default>")
                 : config::load_config_file(opts.config_path);
  if (!cfg) {
    std::cerr << "ferry: invalid config: " << cfg.error().message << "\n";
    return 2;
  }
  if (!opts.listen.empty()) {
    auto hp = config::parse_host_port(opts.listen);
    if (!hp) {
      std::cerr << "ferry: --listen: " << hp.error().message << "\n";
      return 2;
    }
    cfg->server.listen_host = hp->first;
    cfg->server.listen_port = hp->second;
  }
  if (opts.config_path.empty()) {
    std::cerr << "ferry: no --config given; using the embedded default config (model 'default' "
                 "served in-process from models/ferry-demo-1m.gguf, the demo model)\n";
    for (const auto& b : cfg->backends) {
      if (b.local && ::access(b.local->model_path.c_str(), R_OK) != 0) {
        std::cerr << "ferry: the embedded default config serves " << b.local->model_path
                  << " (relative to the working directory), which is not there. Run it from "
                     "the repository's top folder (scripts/run.sh does), or give --config with "
                     "a GGUF model of yours (README: 'A real model').\n";
        return 2;
      }
    }
  }
  if (cfg->auth.keys.empty()) {
    std::cerr << "ferry: no API keys configured: authentication is off\n";
  }
  try {
    std::string host = cfg->server.listen_host;
    uint16_t port = cfg->server.listen_port;
    gateway::Server server(std::move(cfg.value()));
    auto url = server.listen(host, port);
    if (!url) {
      std::cerr << "ferry: " << url.error().message << "\n";
      return 1;
    }
    std::printf("listening on %s\n", url->c_str());
    std::fflush(stdout);
    server.run();
  } catch (const std::exception& e) {
    std::cerr << "ferry: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "ferry: stopped\n";
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "Run the gateway (OpenAI-compatible HTTP API)");
  cmd->add_option("--config", opts->config_path,
                  "Server config YAML (default: the embedded default config)");
  cmd->add_option("--listen", opts->listen,
                  "HOST:PORT to listen on, overriding server.listen (port 0 picks a free port)");
  cmd->callback([opts, &exit_code] { exit_code = serve(*opts); });
}

}  // namespace ferry::cli
