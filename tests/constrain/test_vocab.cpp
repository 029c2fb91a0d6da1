#include "tests/constrain/test_vocab.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "gguf/gguf_writer.h"
#include "model_tools/model_tools.h"
#include "tests/common/temp_dir.h"

namespace ferry::constrain::testing {
namespace {

// The models this test binary writes, removed when it exits.
const ferry::testing::TempDir& test_dir() {
  static const ferry::testing::TempDir dir("ferry_constrain");
  return dir;
}

std::string synth_model_path() {
  const std::string path = test_dir().file("synth-qwen2.gguf");
  if (!std::filesystem::exists(path)) {
    model_tools::SynthOptions o;
    o.arch = "qwen2";
    o.n_embd = 64;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.n_ff = 128;
    o.n_layer = 1;
    o.n_ctx = 1024;
    if (!model_tools::write_synth_model(o, path)) return {};
  }
  return path;
}

std::string source_path(const char* relative) {
  return std::string(FERRY_SOURCE_DIR) + "/" + relative;
}

// ---- a Qwen-sized byte-level BPE vocabulary ------------------------------------------------

// GPT-2's byte-to-unicode mapping, as GGUF files spell byte-level tokens.
std::string byte_level(std::string_view bytes) {
  static const std::vector<std::string> symbols = [] {
    std::vector<std::string> out(256);
    int next = 256;
    for (int pass = 0; pass < 2; ++pass) {
      for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        if (printable != (pass == 0)) continue;
        const int cp = printable ? b : next++;
        out[b] = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                           : std::string{static_cast<char>(0xC0 | (cp >> 6)),
                                         static_cast<char>(0x80 | (cp & 0x3F))};
      }
    }
    return out;
  }();
  std::string out;
  for (const char ch : bytes) out += symbols[static_cast<unsigned char>(ch)];
  return out;
}

// The pair whose merge makes `token` (rank `rank`) in a tiktoken rank table: the token's bytes
// merged by the lower ranks alone end in two parts. Empty when they do not.
std::pair<std::string, std::string> merge_pair(
    const std::string& token, std::uint32_t rank,
    const std::unordered_map<std::string, std::uint32_t>& ranks) {
  std::vector<std::string> parts;
  for (const char c : token) parts.emplace_back(1, c);
  while (parts.size() > 2) {
    std::size_t best = parts.size();
    std::uint32_t best_rank = rank;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best == parts.size()) return {};
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  if (parts.size() != 2) return {};
  return {parts[0], parts[1]};
}

// Qwen2.5's and Qwen3's added tokens after their 151,643 BPE tokens, and their types (3:
// control, 4: user-defined, as Qwen's GGUF files have them).
const std::pair<const char*, int> kQwenAdded[] = {{"<|endoftext|>", 3},
                                                  {"<|im_start|>", 3},
                                                  {"<|im_end|>", 3},
                                                  {"<|object_ref_start|>", 3},
                                                  {"<|object_ref_end|>", 3},
                                                  {"<|box_start|>", 3},
                                                  {"<|box_end|>", 3},
                                                  {"<|quad_start|>", 3},
                                                  {"<|quad_end|>", 3},
                                                  {"<|vision_start|>", 3},
                                                  {"<|vision_end|>", 3},
                                                  {"<|vision_pad|>", 3},
                                                  {"<|image_pad|>", 3},
                                                  {"<|video_pad|>", 3},
                                                  {"<tool_call>", 4},
                                                  {"</tool_call>", 4},
                                                  {"<|fim_prefix|>", 4},
                                                  {"<|fim_middle|>", 4},
                                                  {"<|fim_suffix|>", 4},
                                                  {"<|fim_pad|>", 4},
                                                  {"<|repo_name|>", 4},
                                                  {"<|file_sep|>", 4},
                                                  {"<tool_response>", 4},
                                                  {"</tool_response>", 4},
                                                  {"<think>", 4},
                                                  {"</think>", 4}};

}  // namespace

std::string qwen152k_vocab_path() {
  static std::mutex mu;
  static std::string written;
  std::lock_guard<std::mutex> lock(mu);
  if (!written.empty()) return written;
  const std::string path = test_dir().file("qwen152k-vocab.gguf");
  auto o200k = tokenizer::load_tokenizer("o200k_base");
  if (!o200k) return {};
  constexpr std::uint32_t kBpe = 151643;  // Qwen2's BPE tokens; o200k's lowest ranks here
  constexpr std::uint32_t kPadded = 151936;
  std::vector<std::string> bytes(kBpe);
  std::unordered_map<std::string, std::uint32_t> ranks;
  for (std::uint32_t r = 0; r < kBpe; ++r) {
    bytes[r] = (*o200k)->token_bytes(r);
    ranks.emplace(bytes[r], r);
  }
  std::vector<std::string> tokens;
  std::vector<std::int64_t> types;
  std::vector<std::string> merges;
  for (std::uint32_t r = 0; r < kBpe; ++r) {
    tokens.push_back(byte_level(bytes[r]));
    types.push_back(1);
    if (bytes[r].size() < 2) continue;
    const auto [a, b] = merge_pair(bytes[r], r, ranks);
    if (!a.empty()) merges.push_back(byte_level(a) + " " + byte_level(b));
  }
  for (const auto& [text, type] : kQwenAdded) {
    tokens.emplace_back(text);
    types.push_back(type);
  }
  while (tokens.size() < kPadded) {
    tokens.push_back("[PAD" + std::to_string(tokens.size()) + "]");
    types.push_back(5);  // unused
  }
  std::ifstream in(source_path("tests/tokenizer/templates/qwen3.jinja"));
  std::stringstream chat_template;
  chat_template << in.rdbuf();
  gguf::GgufWriter w;
  using gguf::Value;
  w.set("general.architecture", Value::string("qwen3"));
  w.set("tokenizer.ggml.model", Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::string("qwen2"));
  w.set("tokenizer.ggml.tokens", Value::string_array(std::move(tokens)));
  w.set("tokenizer.ggml.token_type", Value::i32_array(std::move(types)));
  w.set("tokenizer.ggml.merges", Value::string_array(std::move(merges)));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(kBpe));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(kBpe + 2));  // <|im_end|>
  w.set("tokenizer.ggml.padding_token_id", Value::u32(kBpe));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
  w.set("tokenizer.chat_template", Value::string(chat_template.str()));
  if (!w.write_file(path)) return {};
  written = path;
  return written;
}

namespace {

std::string shared_path(const char* relative) {
  const char* dir = std::getenv("FERRY_SHARED_DIR");
  return std::string(dir ? dir : FERRY_SOURCE_DIR "/../shared") + "/" + relative;
}

std::unique_ptr<TestVocab> load(const std::string& name) {
  std::string spec;
  std::string model;
  if (name == "demo") spec = model = source_path("models/ferry-demo-1m.gguf");
  if (name == "synth") spec = model = synth_model_path();
  if (name == "llama2") spec = model = shared_path("models/llama-2-tiny-random.gguf");
  if (name == "cl100k") spec = "cl100k_base";
  if (name == "o200k") spec = "o200k_base";
  if (name == "qwen152k") spec = model = qwen152k_vocab_path();
  if (spec.empty() || (!model.empty() && !std::filesystem::exists(model))) return nullptr;
  auto tok = tokenizer::load_tokenizer(spec);
  if (!tok) return nullptr;
  std::vector<TokenId> eos;
  if ((*tok)->eos_id()) eos.push_back(*(*tok)->eos_id());
  for (const char* end : {"<|im_end|>", "<|endoftext|>", "</s>"}) {
    if (const auto id = (*tok)->token_id(end)) eos.push_back(*id);
  }
  auto v = std::make_unique<TestVocab>();
  v->name = name;
  v->tokenizer = *tok;
  v->vocab = Vocabulary::build(**tok, eos);
  v->model_path = model;
  return v;
}

}  // namespace

const TestVocab* test_vocab(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<TestVocab>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  auto it = loaded.find(name);
  if (it == loaded.end()) it = loaded.emplace(name, load(name)).first;
  return it->second.get();
}

}  // namespace ferry::constrain::testing
