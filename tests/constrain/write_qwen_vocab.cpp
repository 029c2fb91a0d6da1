// Writes the Qwen-sized test vocabulary (test_vocab.h: o200k_base's 151,643 lowest ranks as a
// GGUF BPE, Qwen's added tokens with <tool_call> and <think>, the Qwen3 chat template) to a
// file, for runners that synthesize a model with it (`ferry model synth --vocab-from FILE`):
// real prompts then take a real tokenizer's count of tokens.
// Usage: ferry_write_qwen_vocab OUT.gguf
#include <filesystem>
#include <iostream>
#include <system_error>

#include "tests/constrain/test_vocab.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: ferry_write_qwen_vocab OUT.gguf\n";
    return 2;
  }
  const std::string made = ferry::constrain::testing::qwen152k_vocab_path();
  if (made.empty()) {
    std::cerr << "ferry_write_qwen_vocab: could not make the vocabulary\n";
    return 1;
  }
  std::error_code ec;
  std::filesystem::copy_file(made, argv[1], std::filesystem::copy_options::overwrite_existing, ec);
  if (!ec) std::filesystem::remove_all(std::filesystem::path(made).parent_path(), ec);
  if (ec) {
    std::cerr << "ferry_write_qwen_vocab: " << ec.message() << "\n";
    return 1;
  }
  return 0;
}
