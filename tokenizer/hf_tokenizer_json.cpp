// HuggingFace tokenizer.json: BPE models with the normalizers, pre-tokenizers and decoders the
// supported model families use. Anything else is a load-time error, never a silent estimate.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ferry::tokenizer {
namespace {

using nlohmann::json;

constexpr std::string_view kMetaspace = "\xE2\x96\x81";

// GPT-2's reversible byte <-> printable character table.
std::array<std::uint32_t, 256> byte_to_char() {
  std::array<std::uint32_t, 256> map{};
  std::array<bool, 256> direct{};
  for (int b = 33; b <= 126; ++b) direct[b] = true;
  for (int b = 161; b <= 172; ++b) direct[b] = true;
  for (int b = 174; b <= 255; ++b) direct[b] = true;
  std::uint32_t next = 256;
  for (int b = 0; b < 256; ++b) map[b] = direct[b] ? static_cast<std::uint32_t>(b) : next++;
  return map;
}

struct LoadError {
  std::string message;
};

[[noreturn]] void fail(const std::string& message) {
  throw LoadError{message};
}

std::string str_or(const json& j, const char* key, std::string fallback = {}) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string()) fail(std::string("'") + key + "' must be a string");
  return j[key].get<std::string>();
}

bool bool_or(const json& j, const char* key, bool fallback) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) fail(std::string("'") + key + "' must be a boolean");
  return j[key].get<bool>();
}

// The string a Replace/Split pattern names: {"String": "x"} or {"Regex": "x"}.
std::pair<bool, std::string> pattern_of(const json& j) {
  const json& p = j.at("pattern");
  if (p.contains("String")) return {false, p["String"].get<std::string>()};
  if (p.contains("Regex")) return {true, p["Regex"].get<std::string>()};
  fail("pattern must be {String} or {Regex}");
}

struct Pipeline {
  bool nfc = false;
  bool spaces_to_metaspace = false;
  bool prepend_metaspace = false;
  bool prepend_first_only = false;
  bool prepend_if_missing = false;
  bool byte_level = false;
  bool have_split = false;
  bool add_prefix_space = false;
  SplitPattern pattern = SplitPattern::kGpt2;
  PreKind pre = PreKind::kNone;
};

void apply_normalizer(const json& n, Pipeline& p) {
  if (n.is_null()) return;
  const std::string type = str_or(n, "type");
  if (type == "Sequence") {
    for (const json& child : n.at("normalizers")) apply_normalizer(child, p);
  } else if (type == "NFC") {
    p.nfc = true;
  } else if (type == "Prepend") {
    if (str_or(n, "prepend") != kMetaspace)
      fail("Prepend normalizer with anything but U+2581 is not supported");
    p.prepend_metaspace = true;
  } else if (type == "Replace") {
    const auto [regex, from] = pattern_of(n);
    if (regex || from != " " || str_or(n, "content") != kMetaspace) {
      fail("Replace normalizer other than ' ' -> U+2581 is not supported");
    }
    p.spaces_to_metaspace = true;
  } else {
    fail("normalizer '" + type + "' is not supported");
  }
}

void apply_pre_tokenizer(const json& n, Pipeline& p) {
  if (n.is_null()) return;
  const std::string type = str_or(n, "type");
  if (type == "Sequence") {
    for (const json& child : n.at("pretokenizers")) apply_pre_tokenizer(child, p);
  } else if (type == "Split") {
    const auto [regex, text] = pattern_of(n);
    const auto pattern = regex ? split_pattern_from_regex(text) : std::nullopt;
    if (!pattern) fail("Split pre-tokenizer pattern is not one ferry knows: " + text);
    if (str_or(n, "behavior") != "Isolated" || bool_or(n, "invert", false)) {
      fail("Split pre-tokenizer must be behavior=Isolated, invert=false");
    }
    if (p.have_split) fail("more than one Split pre-tokenizer");
    p.have_split = true;
    p.pattern = *pattern;
    p.pre = PreKind::kSplit;
  } else if (type == "ByteLevel") {
    p.byte_level = true;
    p.add_prefix_space = bool_or(n, "add_prefix_space", false);
    if (bool_or(n, "use_regex", true)) {
      if (p.have_split) fail("ByteLevel use_regex after a Split is not supported");
      p.have_split = true;
      p.pattern = SplitPattern::kGpt2;
      p.pre = PreKind::kSplit;
    }
  } else if (type == "Metaspace") {
    if (str_or(n, "replacement", std::string(kMetaspace)) != kMetaspace)
      fail("Metaspace replacement must be U+2581");
    const std::string scheme =
        str_or(n, "prepend_scheme", bool_or(n, "add_prefix_space", true) ? "always" : "never");
    p.spaces_to_metaspace = true;
    p.prepend_metaspace = scheme != "never";
    p.prepend_first_only = scheme == "first";
    p.prepend_if_missing = true;
    if (bool_or(n, "split", true)) p.pre = PreKind::kMetaspace;
  } else {
    fail("pre-tokenizer '" + type + "' is not supported");
  }
}

// Decoder: whether the first space of the output is stripped, and whether ▁ means space.
struct DecoderInfo {
  bool metaspace_to_space = false;
  bool strip_leading_space = false;
  bool byte_fallback = false;
};

void apply_decoder(const json& n, DecoderInfo& d) {
  if (n.is_null()) return;
  const std::string type = str_or(n, "type");
  if (type == "Sequence") {
    for (const json& child : n.at("decoders")) apply_decoder(child, d);
  } else if (type == "ByteLevel" || type == "Fuse") {
  } else if (type == "ByteFallback") {
    d.byte_fallback = true;
  } else if (type == "Replace") {
    const auto [regex, from] = pattern_of(n);
    if (!regex && from == kMetaspace && str_or(n, "content") == " ") d.metaspace_to_space = true;
  } else if (type == "Strip") {
    if (str_or(n, "content") == " " && n.value("start", 0) == 1) d.strip_leading_space = true;
  } else if (type == "Metaspace") {
    d.metaspace_to_space = true;
    const std::string scheme =
        str_or(n, "prepend_scheme", bool_or(n, "add_prefix_space", true) ? "always" : "never");
    d.strip_leading_space = scheme != "never";
    d.byte_fallback = true;
  } else {
    fail("decoder '" + type + "' is not supported");
  }
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// "<0x0A>" -> 0x0A, or -1.
int byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (std::size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    v *= 16;
    if (c >= '0' && c <= '9')
      v += c - '0';
    else if (c >= 'A' && c <= 'F')
      v += c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v += c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

std::string token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object()) return str_or(j, "content");
  return {};
}

void load_config_sidecar(const std::string& path, TokenizerImpl& t) {
  namespace fs = std::filesystem;
  const fs::path config = fs::path(path).parent_path() / "tokenizer_config.json";
  std::ifstream in(config);
  if (!in) return;
  std::ostringstream ss;
  ss << in.rdbuf();
  const json c = json::parse(ss.str(), nullptr, false);
  if (c.is_discarded() || !c.is_object()) fail(config.string() + ": not JSON");
  if (c.contains("chat_template")) {
    const json& ct = c["chat_template"];
    if (ct.is_string()) {
      t.chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const json& named : ct) {
        if (named.value("name", "") == "default") t.chat_template = named.value("template", "");
      }
    }
  }
  auto id_of = [&](const json& j) {
    const std::string text = token_content(j);
    const auto it = t.text_to_id.find(text);
    return it == t.text_to_id.end() ? kNoToken : it->second;
  };
  if (c.contains("bos_token")) t.bos = id_of(c["bos_token"]);
  if (c.contains("eos_token")) t.eos = id_of(c["eos_token"]);
  if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean())
    t.add_bos = c["add_bos_token"].get<bool>();
  if (c.contains("add_eos_token") && c["add_eos_token"].is_boolean())
    t.add_eos = c["add_eos_token"].get<bool>();
}

// The vocabulary (byte-level strings become the raw bytes they stand for), the decoded text of
// each token, the byte tokens and the unknown token. Sets vocab_size to the largest id + 1.
void load_vocab(const json& model, const DecoderInfo& d, TokenizerImpl& t) {
  const json& vocab = model.at("vocab");
  if (!vocab.is_object()) fail("model.vocab must be an object");
  TokenId max_id = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const TokenId id = it.value().get<TokenId>();
    max_id = std::max(max_id, id);
  }
  t.token_text.assign(max_id + 1, std::string());
  std::vector<std::string> keys(max_id + 1);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const TokenId id = it.value().get<TokenId>();
    const std::string& text = it.key();
    t.token_text[id] = text;
    t.text_to_id.emplace(text, id);
    bool ok = false;
    std::string key = t.byte_level ? byte_level_to_bytes(text, ok) : text;
    keys[id] = std::move(key);
  }
  for (TokenId id = 0; id < keys.size(); ++id) {
    if (!keys[id].empty()) t.bpe.set_token(id, keys[id]);
  }
  t.bpe.finish();

  if (!t.byte_level) {
    t.decoded.resize(keys.size());
    for (TokenId id = 0; id < keys.size(); ++id) {
      const int b = d.byte_fallback ? byte_token(keys[id]) : -1;
      if (b >= 0) {
        t.decoded[id] = std::string(1, static_cast<char>(b));
      } else {
        t.decoded[id] = d.metaspace_to_space ? replace_all(keys[id], kMetaspace, " ") : keys[id];
      }
    }
  }
  if (t.byte_level) {
    for (int b = 0; b < 256; ++b) {
      std::string ch;
      ch.push_back(static_cast<char>(b));
      t.byte_ids[b] = t.bpe.find(ch);
    }
  } else {
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      t.byte_ids[b] = t.bpe.find(buf);
    }
  }
  const std::string unk = str_or(model, "unk_token");
  if (!unk.empty()) {
    const auto it = t.text_to_id.find(unk);
    if (it != t.text_to_id.end()) t.unk_id = it->second;
  }

  t.vocab_size = max_id + 1;
}

// Merges: "a b" strings or [a, b] pairs; rank = position.
void load_merges(const json& model, TokenizerImpl& t) {
  const json& merges = model.at("merges");
  std::uint32_t rank = 0;
  for (const json& m : merges) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        fail("bad merge '" + s + "'");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail("bad merge entry");
    }
    const auto ia = t.text_to_id.find(a);
    const auto ib = t.text_to_id.find(b);
    const auto im = t.text_to_id.find(a + b);
    if (ia == t.text_to_id.end() || ib == t.text_to_id.end() || im == t.text_to_id.end()) {
      fail("merge '" + a + " " + b + "' uses a token that is not in the vocabulary");
    }
    t.bpe.add_merge(ia->second, ib->second, rank++, im->second);
  }
  t.bpe.finish();
}

// Added tokens: matched in the raw text before normalization.
void load_added_tokens(const json& root, TokenizerImpl& t) {
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const json& a : root["added_tokens"]) {
      const TokenId id = a.at("id").get<TokenId>();
      const std::string content = a.at("content").get<std::string>();
      t.specials.add(content, id, bool_or(a, "lstrip", false), bool_or(a, "rstrip", false));
      t.special_text[id] = content;
      if (id >= t.token_text.size()) t.token_text.resize(id + 1);
      t.token_text[id] = content;
      t.text_to_id[content] = id;
      t.vocab_size = std::max<std::size_t>(t.vocab_size, id + 1);
    }
  }
  t.specials.finish();
}

// BOS from a TemplateProcessing post-processor that starts with a special token.
void load_bos(const json& root, TokenizerImpl& t) {
  const json post = root.value("post_processor", json());
  if (post.is_object() && str_or(post, "type") == "TemplateProcessing" && post.contains("single")) {
    const json& single = post["single"];
    if (single.is_array() && !single.empty() && single[0].contains("SpecialToken")) {
      const auto it = t.text_to_id.find(single[0]["SpecialToken"].value("id", ""));
      if (it != t.text_to_id.end()) {
        t.bos = it->second;
        t.add_bos = true;
      }
    }
  }
}

std::unique_ptr<TokenizerImpl> build(std::string name, const json& root) {
  auto impl = std::make_unique<TokenizerImpl>();
  TokenizerImpl& t = *impl;
  t.name = std::move(name);
  const json& model = root.at("model");
  const std::string type = str_or(model, "type", "BPE");
  if (type != "BPE") fail("model type '" + type + "' is not supported (BPE only)");
  if (!str_or(model, "continuing_subword_prefix").empty() ||
      !str_or(model, "end_of_word_suffix").empty()) {
    fail("BPE continuing_subword_prefix / end_of_word_suffix are not supported");
  }
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      model["dropout"].get<double>() != 0.0) {
    fail("BPE dropout is not supported");
  }

  Pipeline p;
  apply_normalizer(root.value("normalizer", json()), p);
  apply_pre_tokenizer(root.value("pre_tokenizer", json()), p);
  DecoderInfo d;
  apply_decoder(root.value("decoder", json()), d);
  if (p.add_prefix_space) fail("ByteLevel add_prefix_space=true is not supported");

  t.model = ModelKind::kBpe;
  t.nfc = p.nfc;
  t.spaces_to_metaspace = p.spaces_to_metaspace;
  t.prepend_metaspace = p.prepend_metaspace;
  t.prepend_first_only = p.prepend_first_only;
  t.prepend_if_missing = p.prepend_if_missing;
  t.pre = p.pre;
  t.pattern = p.pattern;
  t.byte_level = p.byte_level;
  t.whole_piece_first = bool_or(model, "ignore_merges", false);
  t.byte_fallback = bool_or(model, "byte_fallback", false);
  t.strip_leading_space = d.strip_leading_space;

  load_vocab(model, d, t);
  load_merges(model, t);
  load_added_tokens(root, t);
  load_bos(root, t);
  return impl;
}

}  // namespace

std::string byte_level_to_bytes(std::string_view text, bool& ok) {
  static const std::unordered_map<std::uint32_t, int> c2b = [] {
    std::unordered_map<std::uint32_t, int> m;
    const auto b2c = byte_to_char();
    for (int b = 0; b < 256; ++b) m[b2c[b]] = b;
    return m;
  }();
  std::string out;
  ok = true;
  for (std::size_t pos = 0; pos < text.size();) {
    const Decoded dc = decode_utf8(text, pos);
    const auto it = c2b.find(dc.cp);
    if (it == c2b.end()) {
      ok = false;
      return std::string(text);
    }
    out.push_back(static_cast<char>(it->second));
    pos += dc.len;
  }
  return out;
}

Result<std::unique_ptr<TokenizerImpl>> load_hf_tokenizer_json(const std::string& name,
                                                              std::string_view json_text) {
  try {
    const json root = json::parse(json_text);
    auto impl = build(name, root);
    load_config_sidecar(name, *impl);
    return impl;
  } catch (const LoadError& e) {
    return Error::make(ErrorCode::kInvalidRequest, name + ": " + e.message);
  } catch (const std::exception& e) {
    return Error::make(ErrorCode::kInvalidRequest, name + ": " + e.what());
  }
}

}  // namespace ferry::tokenizer
