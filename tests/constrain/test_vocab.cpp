#include "tests/constrain/test_vocab.h"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "model_tools/model_tools.h"

namespace ferry::constrain::testing {
namespace {

std::string synth_model_path() {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ferry_constrain_" + std::to_string(static_cast<long>(::getpid())));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "synth-qwen2.gguf").string();
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
