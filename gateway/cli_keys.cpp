// ferry keys create|list|revoke: the API keys kept in the ledger's database (ledger/keys.h),
// beside those of the config. Single-threaded CLI; each command opens the database itself (and
// brings its schema up to date first, as the server does).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "gateway/cli_commands.h"
#include "ledger/keys.h"
#include "ledger/ledger.h"

namespace ferry::cli {

namespace {

// Opens (and migrates) the ledger once; prints the problem and returns false.
bool ready(const std::string& db, const char* command) {
  ledger::LedgerConfig config;
  config.path = db;
  config.apply_ms = 0;  // opened to migrate only: no row log
  auto opened = ledger::Ledger::open(config, ledger::PriceCatalog(), {});
  if (!opened) std::cerr << "ferry keys " << command << ": " << opened.error().message << "\n";
  return static_cast<bool>(opened);
}

void print_key(const ledger::StoredKey& k) {
  std::cout << k.id << "\t" << k.role << "\t" << k.team << "\t" << k.project << "\t"
            << (k.revoked_us ? "revoked" : "active") << "\n";
}

void add_create(CLI::App* keys, int& exit_code) {
  auto* cmd = keys->add_subcommand("create", "create a key; prints its secret once");
  auto db = std::make_shared<std::string>();
  auto spec = std::make_shared<ledger::StoredKey>();
  cmd->add_option("--db", *db, "ledger file or postgresql:// URL")->required();
  cmd->add_option("--id", spec->id, "the key's id (default: a random one)");
  cmd->add_option("--role", spec->role, "app, finance or admin")
      ->default_val("app")
      ->check(CLI::IsMember({"app", "finance", "admin"}));
  cmd->add_option("--team", spec->team, "the key's team");
  cmd->add_option("--project", spec->project, "the key's project");
  cmd->add_option("--tag", spec->tags, "a trusted tag (repeatable)");
  cmd->callback([=, &exit_code] {
    if (!ready(*db, "create")) {
      exit_code = 1;
      return;
    }
    ledger::StoredKey k = *spec;
    k.created_by = "cli";
    k.created_us = unix_micros_now();
    auto made = ledger::create_key(*db, k, {});
    if (!made) {
      std::cerr << "ferry keys create: " << made.error().message << "\n";
      exit_code = 1;
      return;
    }
    std::cerr << "key '" << made->key.id << "' created; its secret is shown once:\n";
    std::cout << made->secret << "\n";
    exit_code = 0;
  });
}

void add_list(CLI::App* keys, int& exit_code) {
  auto* cmd = keys->add_subcommand("list", "list the stored keys (id, role, team, project)");
  auto db = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  cmd->add_option("--db", *db, "ledger file or postgresql:// URL")->required();
  cmd->add_flag("--all", *all, "revoked keys too");
  cmd->callback([=, &exit_code] {
    if (!ready(*db, "list")) {
      exit_code = 1;
      return;
    }
    auto list = ledger::list_keys(*db, *all);
    if (!list) {
      std::cerr << "ferry keys list: " << list.error().message << "\n";
      exit_code = 1;
      return;
    }
    for (const auto& k : *list) print_key(k);
    exit_code = 0;
  });
}

void add_revoke(CLI::App* keys, int& exit_code) {
  auto* cmd = keys->add_subcommand("revoke", "revoke a stored key (every instance within 5 s)");
  auto db = std::make_shared<std::string>();
  auto id = std::make_shared<std::string>();
  cmd->add_option("--db", *db, "ledger file or postgresql:// URL")->required();
  cmd->add_option("id", *id, "the key's id")->required();
  cmd->callback([=, &exit_code] {
    if (!ready(*db, "revoke")) {
      exit_code = 1;
      return;
    }
    auto done = ledger::revoke_key(*db, *id, unix_micros_now());
    if (!done) {
      std::cerr << "ferry keys revoke: " << done.error().message << "\n";
      exit_code = 1;
      return;
    }
    print_key(*done);
    exit_code = 0;
  });
}

}  // namespace

void add_keys_commands(CLI::App& app, int& exit_code) {
  auto* keys = app.add_subcommand("keys", "API keys kept in the ledger's database");
  keys->require_subcommand(1);
  add_create(keys, exit_code);
  add_list(keys, exit_code);
  add_revoke(keys, exit_code);
}

}  // namespace ferry::cli
