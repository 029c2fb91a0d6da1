// The conformance check against llama.cpp's tokenizer (node-llama-cpp through llama_ref.js),
// shared by the GGUF conformance tests. Single-threaded test code.
#pragma once

#include <string>
#include <vector>

namespace ferry::tokenizer {

// Every text encoded by ferry's tokenizer of `model` (a GGUF file) equals llama.cpp's ids for it
// (no BOS; special-token text parsed when `special`); the first mismatches are reported.
void expect_same_as_llama_cpp(const std::string& model, const std::vector<std::string>& texts,
                              bool special = false);

}  // namespace ferry::tokenizer
