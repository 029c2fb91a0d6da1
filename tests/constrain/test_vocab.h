// Vocabularies for the constraint tests: the committed demo model's (byte-level BPE, 2,048),
// a synthesized qwen-style model's (ferry model synth), the shared llama-2 SentencePiece one
// (32,000, byte fallback; absent on some machines), the embedded cl100k_base / o200k_base, and a
// Qwen-sized one (151,936: o200k's 151,643 lowest ranks as a GGUF BPE with merges, Qwen's added
// tokens, <tool_call> and <think> among them, and the Qwen3 chat template).
// Loaded once per process; the returned objects are immutable.
#pragma once

#include <memory>
#include <string>

#include "constrain/vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace ferry::constrain::testing {

struct TestVocab {
  std::string name;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  std::shared_ptr<const Vocabulary> vocab;
  std::string model_path;  // the GGUF file, when the vocabulary came from one
};

// name: "demo", "synth", "llama2" (null when the shared file is absent), "cl100k", "o200k",
// "qwen152k".
const TestVocab* test_vocab(const std::string& name);

// The Qwen-sized vocabulary as a GGUF file of tokenizer metadata only (written once per
// process; `ferry model synth --vocab-from` it for a model). Empty on failure.
std::string qwen152k_vocab_path();

}  // namespace ferry::constrain::testing
