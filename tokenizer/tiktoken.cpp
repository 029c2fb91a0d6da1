// tiktoken rank files (base64 token, space, rank per line) and the embedded encodings.
#include <string>

#include "tokenizer/embedded_data.h"
#include "tokenizer/tokenizer_impl.h"

namespace ferry::tokenizer {
namespace {

struct Special {
  const char* text;
  TokenId id;
};

constexpr Special kCl100kSpecials[] = {{"<|endoftext|>", 100257},
                                       {"<|fim_prefix|>", 100258},
                                       {"<|fim_middle|>", 100259},
                                       {"<|fim_suffix|>", 100260},
                                       {"<|endofprompt|>", 100276}};
constexpr Special kO200kSpecials[] = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

bool decode_base64(std::string_view in, std::string& out) {
  out.clear();
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : in) {
    if (c == '=') break;
    const int v = base64_value(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

Result<std::unique_ptr<TokenizerImpl>> load_tiktoken_text(std::string name, std::string_view ranks,
                                                          SplitPattern pattern) {
  auto impl = std::make_unique<TokenizerImpl>();
  impl->name = std::move(name);
  impl->model = ModelKind::kBpe;
  impl->pre = PreKind::kSplit;
  impl->pattern = pattern;
  impl->byte_level = true;
  impl->whole_piece_first = true;
  std::string bytes;
  std::size_t line_no = 0;
  TokenId max_id = 0;
  std::size_t pos = 0;
  while (pos < ranks.size()) {
    std::size_t eol = ranks.find('\n', pos);
    if (eol == std::string_view::npos) eol = ranks.size();
    std::string_view line = ranks.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::size_t space = line.find(' ');
    std::uint64_t rank = 0;
    bool ok = space != std::string_view::npos && space + 1 < line.size();
    for (std::size_t i = space + 1; ok && i < line.size(); ++i) {
      ok = line[i] >= '0' && line[i] <= '9';
      rank = rank * 10 + static_cast<std::uint64_t>(line[i] - '0');
      ok = ok && rank < 0xFFFFFFF0u;
    }
    if (!ok || !decode_base64(line.substr(0, space), bytes) || bytes.empty()) {
      return Error::make(ErrorCode::kInvalidRequest,
                         impl->name + ":" + std::to_string(line_no) + ": not a tiktoken rank line");
    }
    impl->bpe.set_token(static_cast<TokenId>(rank), bytes);
    max_id = std::max(max_id, static_cast<TokenId>(rank));
  }
  impl->bpe.finish();
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    impl->byte_ids[b] = impl->bpe.find(std::string_view(&c, 1));
    if (impl->byte_ids[b] == kNoToken) {
      return Error::make(ErrorCode::kInvalidRequest,
                         impl->name + ": byte " + std::to_string(b) + " has no token");
    }
  }
  if (!impl->bpe.prepare_rank_merge()) {
    return Error::make(ErrorCode::kInvalidRequest, impl->name + ": a byte has no token");
  }
  impl->merge_by_rank = true;
  impl->vocab_size = static_cast<std::size_t>(max_id) + 1;
  return impl;
}

Result<std::unique_ptr<TokenizerImpl>> load_embedded_encoding(std::string_view name) {
  const bool o200k = name == "o200k_base";
  const std::string_view data = o200k ? embedded_o200k_base() : embedded_cl100k_base();
  auto impl = load_tiktoken_text(std::string(name), data,
                                 o200k ? SplitPattern::kO200k : SplitPattern::kCl100k);
  if (!impl) return impl;
  TokenizerImpl& t = **impl;
  auto add = [&](const Special& s) {
    t.specials.add(s.text, s.id);
    t.special_text.emplace(s.id, s.text);
    t.vocab_size = std::max<std::size_t>(t.vocab_size, s.id + 1);
  };
  if (o200k) {
    for (const Special& s : kO200kSpecials) add(s);
  } else {
    for (const Special& s : kCl100kSpecials) add(s);
  }
  t.specials.finish();
  t.eos = o200k ? 199999 : 100257;
  return impl;
}

}  // namespace ferry::tokenizer
