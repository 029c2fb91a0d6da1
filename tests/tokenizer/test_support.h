// Test helpers for the tokenizer tests: the conformance corpus, the random-string generator,
// and running the node reference implementations. Single-threaded test code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ferry::tokenizer::testing {

// Text assembled from files on the machine (prose in many languages, C, Python, JSON, YAML)
// and hand-written samples (scripts, emoji, BOMs, NBSP, long white-space and digit runs).
std::vector<std::string> conformance_corpus();

// `count` random valid UTF-8 strings, weighted towards the characters pre-tokenizers treat
// specially. Deterministic for a seed.
std::vector<std::string> random_strings(std::uint32_t seed, std::size_t count);

// Runs `node <refs>/<script> args... <input.json> <output.json>` on `input`, returning the
// parsed output, or an error message.
struct RefResult {
  std::optional<nlohmann::json> json;
  std::string error;
};
RefResult run_reference(const std::string& script, const std::vector<std::string>& args,
                        const nlohmann::json& input);
RefResult run_reference(const std::string& script, const std::vector<std::string>& args,
                        const nlohmann::ordered_json& input);

// Where the reference packages live, and whether they are installed.
std::string refs_dir();
bool refs_installed();

std::string hex_escape(const std::string& s);

}  // namespace ferry::tokenizer::testing
