// Fuzzes the constraint engine (constrain/): schema text -> compile_json_schema must give a
// grammar or a clear error (kInvalidRequest with a message), never a crash or a hang; a grammar
// is then walked by a Matcher over cl100k_base with a token budget, choosing among the allowed
// tokens by a seed from the input: every step must allow some token, and a walk that ends must
// be one JSON document (nlohmann's parser). Seeds: corpus/constrain_schema/ (hand-written
// schemas of the constraint tests).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "constrain/matcher.h"
#include "constrain/schema.h"
#include "tokenizer/tokenizer.h"

using namespace ferry;

namespace {

const std::shared_ptr<const constrain::Vocabulary>& vocabulary() {
  static const std::shared_ptr<const constrain::Vocabulary> v = [] {
    auto tok = tokenizer::load_tokenizer("cl100k_base");
    if (!tok) __builtin_trap();
    std::vector<constrain::TokenId> eos;
    if (const auto id = (*tok)->eos_id()) eos.push_back(*id);
    if (const auto id = (*tok)->token_id("<|endoftext|>")) eos.push_back(*id);
    if (eos.empty()) __builtin_trap();  // the walk could never end
    return constrain::Vocabulary::build(**tok, eos);
  }();
  return v;
}

// FNV-1a of the input: the walk's seed.
std::uint64_t seed_of(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constrain::CompileOptions options;
  options.max_string_chars = 16;
  options.max_array_items = 4;
  auto g = constrain::compile_json_schema(text, options);
  if (!g) {
    if (g.error().code != ErrorCode::kInvalidRequest || g.error().message.empty()) __builtin_trap();
    return 0;
  }
  const auto grammar = std::make_shared<const constrain::Grammar>(std::move(g).value());
  constrain::Matcher m(grammar, vocabulary());
  constexpr std::uint64_t kBudget = 96;
  m.set_token_budget(kBudget);
  std::uint64_t rng = seed_of(text) | 1;
  std::vector<std::uint64_t> mask;
  std::vector<constrain::TokenId> allowed;
  std::string out;
  for (std::uint64_t step = 0; step < kBudget && !m.ended(); ++step) {
    m.fill_mask(mask);
    allowed.clear();
    for (std::size_t w = 0; w < mask.size(); ++w)
      for (std::uint64_t bits = mask[w]; bits; bits &= bits - 1)
        allowed.push_back(static_cast<constrain::TokenId>(w * 64 + __builtin_ctzll(bits)));
    if (allowed.empty()) __builtin_trap();  // a live matcher always allows something
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    const constrain::TokenId id = allowed[rng % allowed.size()];
    if (!m.accept_token(id)) __builtin_trap();  // what the mask allows is accepted
    if (!m.vocabulary().is_eos(id)) out += m.vocabulary().bytes(id);
  }
  if (m.ended() && !nlohmann::json::accept(out)) __builtin_trap();
  return 0;
}
