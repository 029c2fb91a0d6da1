// GGUF vocabularies (tokenizer.ggml.*), read through ferry_gguf's reader: SentencePiece
// ("llama": scores, byte fallback) with llama.cpp's merge order, and byte-level BPE ("gpt2":
// merges) with the pre-tokenizer tokenizer.ggml.pre names.
#include <algorithm>
#include <cstdio>

#include "gguf/gguf_reader.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ferry::tokenizer {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";

// llama.cpp token types.
enum TokenType : int {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

Error invalid(const std::string& path, const std::string& what) {
  return Error::make(ErrorCode::kInvalidRequest, path + ": " + what);
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

int byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  unsigned v = 0;
  if (std::sscanf(std::string(t.substr(3, 2)).c_str(), "%2x", &v) != 1) return -1;
  return static_cast<int>(v);
}

std::optional<SplitPattern> pattern_for_pre(std::string_view pre, bool& ignore_merges) {
  ignore_merges = false;
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "smaug-bpe") {
    ignore_merges = pre != "smaug-bpe";
    return SplitPattern::kCl100k;
  }
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return SplitPattern::kQwen2;
  if (pre == "gpt2" || pre == "gpt-2") return SplitPattern::kGpt2;
  // llama.cpp's fallback, also what it uses when the key is absent (with a warning).
  if (pre == "default") return SplitPattern::kLlamaDefault;
  return std::nullopt;
}

// A SentencePiece vocabulary (tokenizer.ggml.model "llama"): scores, byte tokens <0xNN>.
void load_spm(const gguf::GgufFile& f, const gguf::Value& tokens, const std::vector<int>& types,
              TokenizerImpl& t) {
  const std::size_t n = tokens.strings.size();
  t.model = ModelKind::kSpmScore;
  t.byte_level = false;
  t.spm_add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  t.strip_leading_space = t.spm_add_space_prefix;
  t.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  t.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  const gguf::Value* scores = f.find("tokenizer.ggml.scores");
  t.scores.assign(n, 0.0f);
  if (scores && scores->type == gguf::ValueType::kArray) {
    for (std::size_t i = 0; i < n && i < scores->floats.size(); ++i)
      t.scores[i] = static_cast<float>(scores->floats[i]);
  }
  for (TokenId id = 0; id < n; ++id) t.bpe.set_token(id, tokens.strings[id]);
  t.bpe.finish();
  t.decoded.resize(n);
  for (TokenId id = 0; id < n; ++id) {
    const std::string& text = tokens.strings[id];
    const int b = types[id] == kByte ? byte_token(text) : -1;
    t.decoded[id] =
        b >= 0 ? std::string(1, static_cast<char>(b)) : replace_all(text, kMetaspace, " ");
  }
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    TokenId id = t.bpe.find(buf);
    if (id == kNoToken) id = t.bpe.find(std::string(1, static_cast<char>(b)));
    t.byte_ids[b] = id == kNoToken ? t.unk_id : id;
  }
}

// A byte-level BPE vocabulary (tokenizer.ggml.model "gpt2"): the pre-tokenizer and the merges.
Status load_bpe(const gguf::GgufFile& f, const std::string& path, const gguf::Value& tokens,
                TokenizerImpl& t) {
  const std::size_t n = tokens.strings.size();
  const std::string pre(f.get_string("tokenizer.ggml.pre").value_or("default"));
  bool ignore_merges = false;
  const auto pattern = pattern_for_pre(pre, ignore_merges);
  if (!pattern) return invalid(path, "tokenizer.ggml.pre '" + pre + "' is not supported");
  t.model = ModelKind::kBpe;
  t.pre = PreKind::kSplit;
  t.pattern = *pattern;
  t.byte_level = true;
  t.whole_piece_first = ignore_merges;
  t.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
  t.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  for (TokenId id = 0; id < n; ++id) {
    bool ok = false;
    std::string bytes = byte_level_to_bytes(tokens.strings[id], ok);
    t.bpe.set_token(id, ok ? bytes : tokens.strings[id]);
  }
  t.bpe.finish();
  const gguf::Value* merges = f.find("tokenizer.ggml.merges");
  if (!merges || merges->type != gguf::ValueType::kArray)
    return invalid(path, "no tokenizer.ggml.merges");
  std::uint32_t rank = 0;
  for (const std::string& m : merges->strings) {
    const std::size_t space = m.find(' ', 1);
    if (space == std::string::npos) return invalid(path, "bad merge '" + m + "'");
    const std::string a = m.substr(0, space);
    const std::string b = m.substr(space + 1);
    const auto ia = t.text_to_id.find(a);
    const auto ib = t.text_to_id.find(b);
    const auto im = t.text_to_id.find(a + b);
    if (ia == t.text_to_id.end() || ib == t.text_to_id.end() || im == t.text_to_id.end()) {
      ++rank;
      continue;  // llama.cpp keeps such merges but they can never apply
    }
    t.bpe.add_merge(ia->second, ib->second, rank++, im->second);
  }
  t.bpe.finish();
  for (int b = 0; b < 256; ++b) t.byte_ids[b] = t.bpe.find(std::string(1, static_cast<char>(b)));
  return {};
}

// A WordPiece vocabulary (tokenizer.ggml.model "bert", llama.cpp's WPM): word-start tokens
// spelled with "▁" in front, continuations bare. llama.cpp wraps every input in BOS ([CLS],
// id 101 unless the file says) and the separator ([SEP], 102 unless the file says), whatever
// add_bos/add_eos say: here that is BOS and EOS, both added. [UNK] is 100 unless the file says.
void load_wpm(const gguf::GgufFile& f, const gguf::Value& tokens, TokenizerImpl& t) {
  const std::size_t n = tokens.strings.size();
  const auto id_or = [&](const char* key, TokenId fallback) -> TokenId {
    const auto v = f.get_uint(key);
    if (v && *v < n) return static_cast<TokenId>(*v);
    return fallback < n ? fallback : kNoToken;
  };
  t.model = ModelKind::kWordPiece;
  t.byte_level = false;
  t.bos = id_or("tokenizer.ggml.bos_token_id", 101);
  t.eos = id_or("tokenizer.ggml.seperator_token_id", 102);  // llama.cpp's spelling of the key
  t.unk_id = id_or("tokenizer.ggml.unknown_token_id", 100);
  t.add_bos = t.bos != kNoToken;
  t.add_eos = t.eos != kNoToken;
  t.wpm_lowercase = f.get_bool("tokenizer.ggml.normalizer.lowercase").value_or(true);
  t.wpm_strip_accents =
      f.get_bool("tokenizer.ggml.normalizer.strip_accents").value_or(t.wpm_lowercase);
  t.strip_leading_space = true;
  t.decoded.resize(n);
  for (TokenId id = 0; id < n; ++id) {
    const std::string& text = tokens.strings[id];
    t.bpe.set_token(id, text);
    t.wpm_max_token_len = std::max(t.wpm_max_token_len, text.size());
    t.decoded[id] = text.starts_with(kMetaspace) ? " " + text.substr(kMetaspace.size()) : text;
  }
  t.bpe.finish();
}

}  // namespace

Result<std::unique_ptr<TokenizerImpl>> load_gguf_vocab(const std::string& path) {
  auto file = gguf::GgufFile::open(path);
  if (!file) return std::move(file).error();
  const gguf::GgufFile& f = **file;
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return invalid(path, "no tokenizer.ggml.model");
  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != gguf::ValueType::kArray || tokens->strings.empty()) {
    return invalid(path, "no tokenizer.ggml.tokens");
  }
  const std::size_t n = tokens->strings.size();
  std::vector<int> types(n, kNormal);
  if (const gguf::Value* t = f.find("tokenizer.ggml.token_type");
      t && t->type == gguf::ValueType::kArray) {
    for (std::size_t i = 0; i < n && i < t->ints.size(); ++i)
      types[i] = static_cast<int>(t->ints[i]);
    for (std::size_t i = 0; i < n && i < t->uints.size(); ++i)
      types[i] = static_cast<int>(t->uints[i]);
  }

  auto impl = std::make_unique<TokenizerImpl>();
  TokenizerImpl& t = *impl;
  t.name = path;
  t.vocab_size = n;
  t.token_text = tokens->strings;
  for (TokenId id = 0; id < n; ++id) t.text_to_id.emplace(tokens->strings[id], id);
  const auto id_key = [&](const char* key) -> TokenId {
    const auto v = f.get_uint(key);
    return v && *v < n ? static_cast<TokenId>(*v) : kNoToken;
  };
  t.bos = id_key("tokenizer.ggml.bos_token_id");
  t.eos = id_key("tokenizer.ggml.eos_token_id");
  t.unk_id = id_key("tokenizer.ggml.unknown_token_id");
  if (const auto s = f.get_string("tokenizer.chat_template")) t.chat_template = std::string(*s);

  // Control and user-defined tokens are matched as specials.
  for (TokenId id = 0; id < n; ++id) {
    if (types[id] == kControl || types[id] == kUserDefined) {
      t.specials.add(tokens->strings[id], id);
      t.special_text[id] = tokens->strings[id];
    }
    if (types[id] == kUnused) t.unused_ids.push_back(id);
  }
  t.specials.finish();

  if (*model == "llama") {
    load_spm(f, *tokens, types, t);
    return impl;
  }
  if (*model == "gpt2") {
    if (Status s = load_bpe(f, path, *tokens, t); !s) return s.error();
    return impl;
  }
  if (*model == "bert") {
    load_wpm(f, *tokens, t);
    return impl;
  }
  return invalid(path, "tokenizer.ggml.model '" + std::string(*model) +
                           "' is not supported (llama, gpt2, bert)");
}

// ---- llama.cpp SentencePiece merge ---------------------------------------------------------

void TokenizerImpl::encode_spm(std::string_view text, std::vector<TokenId>& out) const {
  struct Symbol {
    int prev;
    int next;
    std::uint32_t start;
    std::uint32_t len;
  };
  struct Bigram {
    float score;
    int left;
    int right;
    std::uint32_t size;
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Bigram> heap;
  symbols.clear();
  heap.clear();
  for (std::size_t pos = 0; pos < text.size();) {
    const auto c = static_cast<unsigned char>(text[pos]);
    std::size_t len = c < 0x80         ? 1
                      : (c >> 5) == 6  ? 2
                      : (c >> 4) == 14 ? 3
                      : (c >> 3) == 30 ? 4
                                       : 1;
    len = std::min(len, text.size() - pos);
    const int idx = static_cast<int>(symbols.size());
    symbols.push_back({idx - 1, pos + len == text.size() ? -1 : idx + 1,
                       static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(len)});
    pos += len;
  }
  // Highest score first; on ties the leftmost.
  const auto less = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view s =
        text.substr(symbols[left].start, symbols[left].len + symbols[right].len);
    const TokenId id = bpe.find(s);
    if (id == kNoToken || id >= scores.size()) return;
    heap.push_back({scores[id], left, right, static_cast<std::uint32_t>(s.size())});
    std::push_heap(heap.begin(), heap.end(), less);
  };
  for (std::size_t i = 1; i < symbols.size(); ++i)
    try_add(static_cast<int>(i - 1), static_cast<int>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), less);
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.len == 0 || right.len == 0 || left.len + right.len != b.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const std::string_view s = text.substr(symbols[i].start, symbols[i].len);
    const TokenId id = bpe.find(s);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    for (const char c : s) {
      const TokenId b = byte_ids[static_cast<unsigned char>(c)];
      if (b != kNoToken) out.push_back(b);
    }
  }
}

}  // namespace ferry::tokenizer
