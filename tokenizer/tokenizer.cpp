#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ferry::tokenizer {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581

bool is_ascii(std::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// Per-thread scratch so that encoding allocates nothing per token once warm.
std::vector<TokenId>& scratch_ids() {
  thread_local std::vector<TokenId> ids;
  ids.clear();
  return ids;
}

}  // namespace

// ---- SpecialMatcher ---------------------------------------------------------------------

void SpecialMatcher::add(std::string text, TokenId id, bool lstrip, bool rstrip) {
  if (text.empty()) return;
  entries_.push_back(Entry{std::move(text), id, lstrip, rstrip});
}

void SpecialMatcher::finish() {
  by_text_.clear();
  lengths_.clear();
  first_byte_.fill(false);
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    by_text_.emplace(entries_[i].text, i);  // the first added wins on duplicates
    lengths_.push_back(entries_[i].text.size());
    first_byte_[static_cast<unsigned char>(entries_[i].text[0])] = true;
  }
  std::sort(lengths_.begin(), lengths_.end(), std::greater<>());
  lengths_.erase(std::unique(lengths_.begin(), lengths_.end()), lengths_.end());
  single_first_byte_ = -1;
  int distinct = 0;
  for (int b = 0; b < 256; ++b) {
    if (first_byte_[b]) {
      ++distinct;
      single_first_byte_ = b;
    }
  }
  if (distinct != 1) single_first_byte_ = -1;
}

SpecialMatcher::Match SpecialMatcher::find(std::string_view text, std::size_t from) const {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t pos = from;
  while (pos < text.size()) {
    if (single_first_byte_ >= 0) {
      const void* hit = std::memchr(s + pos, single_first_byte_, text.size() - pos);
      if (!hit) break;
      pos = static_cast<std::size_t>(static_cast<const unsigned char*>(hit) - s);
    } else if (!first_byte_[s[pos]]) {
      ++pos;
      continue;
    }
    for (const std::size_t len : lengths_) {
      if (pos + len > text.size()) continue;
      const auto it = by_text_.find(text.substr(pos, len));
      if (it == by_text_.end()) continue;
      const Entry& e = entries_[it->second];
      std::size_t start = pos;
      std::size_t end = pos + len;
      if (e.lstrip) {
        while (start > from && (text[start - 1] == ' ' || text[start - 1] == '\t' ||
                                text[start - 1] == '\n' || text[start - 1] == '\r')) {
          --start;
        }
      }
      if (e.rstrip) {
        while (end < text.size() &&
               (text[end] == ' ' || text[end] == '\t' || text[end] == '\n' || text[end] == '\r')) {
          ++end;
        }
      }
      return Match{start, end - start, e.id};
    }
    ++pos;
  }
  return Match{std::string_view::npos, 0, kNoToken};
}

// ---- TokenizerImpl ----------------------------------------------------------------------

void TokenizerImpl::encode_piece(std::string_view piece, std::vector<TokenId>& out) const {
  if (whole_piece_first) {
    const TokenId id = bpe.find(piece);
    if (id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  encode_merged(piece, out);
}

void TokenizerImpl::encode_merged(std::string_view piece, std::vector<TokenId>& out) const {
  if (merge_by_rank) {
    bpe.merge_by_rank(piece, out);
    return;
  }
  thread_local std::vector<TokenId> ids;
  ids.clear();
  if (byte_level) {
    for (const char c : piece) ids.push_back(byte_ids[static_cast<unsigned char>(c)]);
  } else {
    bool prev_unk = false;
    for (std::size_t pos = 0; pos < piece.size();) {
      const std::size_t len = decode_utf8(piece, pos).len;
      const TokenId id = bpe.find(piece.substr(pos, len));
      if (id != kNoToken) {
        ids.push_back(id);
        prev_unk = false;
      } else if (byte_fallback) {
        for (std::size_t k = 0; k < len; ++k)
          ids.push_back(byte_ids[static_cast<unsigned char>(piece[pos + k])]);
        prev_unk = false;
      } else if (unk_id != kNoToken) {
        if (!prev_unk) ids.push_back(unk_id);  // fuse_unk
        prev_unk = true;
      }
      pos += len;
    }
  }
  bpe.merge(ids, out);
}

void TokenizerImpl::encode_split_pieces(std::string_view text, std::vector<TokenId>& out) const {
  // Most pieces are tokens whole, found by one lookup in an index of megabytes: split a batch
  // of pieces and start all their lookups before waiting on the first, rather than missing the
  // cache one piece at a time.
  constexpr std::size_t kBatch = 16;
  std::uint32_t ends[kBatch + 1];
  BytesIndex::Probe probes[kBatch];
  const BytesIndex& index = bpe.index();
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t count = 0;
    ends[0] = static_cast<std::uint32_t>(pos);
    for (std::size_t p = pos; count < kBatch && p < text.size(); ++count) {
      const std::size_t end = next_piece(pattern, text, p);
      probes[count] = BytesIndex::probe(text.substr(p, end - p));
      index.prefetch(probes[count]);
      ends[count + 1] = static_cast<std::uint32_t>(end);
      p = end;
    }
    for (std::size_t k = 0; k < count; ++k) {
      const std::string_view piece = text.substr(ends[k], ends[k + 1] - ends[k]);
      const TokenId id = index.find(piece, probes[k]);
      if (id != kNoToken) {
        out.push_back(id);
      } else {
        encode_merged(piece, out);
      }
    }
    pos = ends[count];
  }
}

void TokenizerImpl::encode_segment(std::string_view text, bool first_segment,
                                   std::vector<TokenId>& out) const {
  if (text.empty()) return;
  std::string normalized;
  std::string_view view = text;
  if (nfc && !is_ascii(view)) {
    normalized = nfc_normalize(view);
    view = normalized;
  }
  if (model == ModelKind::kWordPiece) {
    encode_wpm(view, out);
    return;
  }
  if (model == ModelKind::kSpmScore) {
    std::string prepared;
    // llama.cpp prefixes a space at the start and after every special token, i.e. every
    // segment.
    if (spm_add_space_prefix) prepared.push_back(' ');
    prepared.append(view);
    std::string escaped;
    escaped.reserve(prepared.size() + 8);
    for (const char c : prepared) {
      if (c == ' ') {
        escaped.append(kMetaspace);
      } else {
        escaped.push_back(c);
      }
    }
    encode_spm(escaped, out);
    return;
  }
  if (spaces_to_metaspace || prepend_metaspace) {
    std::string m;
    m.reserve(view.size() + 8);
    const bool starts_with_space = spaces_to_metaspace ? view.front() == ' ' : false;
    const bool missing = !(starts_with_space || view.substr(0, kMetaspace.size()) == kMetaspace);
    if (prepend_metaspace && (first_segment || !prepend_first_only) &&
        (missing || !prepend_if_missing)) {
      m.append(kMetaspace);
    }
    for (const char c : view) {
      if (spaces_to_metaspace && c == ' ') {
        m.append(kMetaspace);
      } else {
        m.push_back(c);
      }
    }
    normalized = std::move(m);
    view = normalized;
  }
  switch (pre) {
    case PreKind::kNone:
      encode_piece(view, out);
      break;
    case PreKind::kSplit:
      if (whole_piece_first) {
        encode_split_pieces(view, out);
        break;
      }
      for (std::size_t pos = 0; pos < view.size();) {
        const std::size_t end = next_piece(pattern, view, pos);
        encode_piece(view.substr(pos, end - pos), out);
        pos = end;
      }
      break;
    case PreKind::kMetaspace: {
      std::size_t start = 0;
      std::size_t pos = view.find(kMetaspace, 1);
      while (pos != std::string_view::npos) {
        encode_piece(view.substr(start, pos - start), out);
        start = pos;
        pos = view.find(kMetaspace, pos + kMetaspace.size());
      }
      encode_piece(view.substr(start), out);
      break;
    }
  }
}

std::string_view TokenizerImpl::output_bytes(TokenId id) const {
  if (id < decoded.size()) return decoded[id];
  return bpe.token_bytes(id);
}

// ---- Tokenizer --------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

const std::string& Tokenizer::name() const {
  return impl_->name;
}

void Tokenizer::encode(std::string_view text, std::vector<TokenId>& out, Specials specials) const {
  const TokenizerImpl& t = *impl_;
  if (specials == Specials::kAsText || t.specials.empty()) {
    t.encode_segment(text, true, out);
    return;
  }
  std::size_t pos = 0;
  bool first = true;
  while (pos <= text.size()) {
    const SpecialMatcher::Match m = t.specials.find(text, pos);
    if (m.pos == std::string_view::npos) {
      t.encode_segment(text.substr(pos), first, out);
      break;
    }
    t.encode_segment(text.substr(pos, m.pos - pos), first, out);
    out.push_back(m.id);
    first = false;
    pos = m.pos + m.len;
    if (pos == text.size()) break;
  }
}

void Tokenizer::split_specials(std::string_view text, std::vector<Piece>& out) const {
  const TokenizerImpl& t = *impl_;
  if (t.specials.empty()) {
    out.push_back({0, text.size(), std::nullopt, true});
    return;
  }
  // The same walk as encode() with Specials::kParse.
  std::size_t pos = 0;
  bool first = true;
  while (pos <= text.size()) {
    const SpecialMatcher::Match m = t.specials.find(text, pos);
    if (m.pos == std::string_view::npos) {
      out.push_back({pos, text.size() - pos, std::nullopt, first});
      break;
    }
    out.push_back({pos, m.pos - pos, std::nullopt, first});
    out.push_back({m.pos, m.len, m.id, false});
    first = false;
    pos = m.pos + m.len;
    if (pos == text.size()) break;
  }
}

void Tokenizer::encode_run(std::string_view run, bool first, std::vector<TokenId>& out) const {
  impl_->encode_segment(run, first, out);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, Specials specials) const {
  std::vector<TokenId> out;
  encode(text, out, specials);
  return out;
}

std::size_t Tokenizer::count(std::string_view text, Specials specials) const {
  std::vector<TokenId>& ids = scratch_ids();
  encode(text, ids, specials);
  const std::size_t n = ids.size();
  if (ids.capacity() > (std::size_t{1} << 22))
    std::vector<TokenId>().swap(ids);  // do not pin huge buffers
  return n;
}

std::string Tokenizer::decode(std::span<const TokenId> ids) const {
  std::string out;
  bool first = true;
  for (const TokenId id : ids) {
    const auto it = impl_->special_text.find(id);
    std::string_view bytes =
        it != impl_->special_text.end() ? std::string_view(it->second) : impl_->output_bytes(id);
    if (first && impl_->strip_leading_space && !bytes.empty() && bytes[0] == ' ')
      bytes.remove_prefix(1);
    first = false;
    out.append(bytes);
  }
  return out;
}

std::string Tokenizer::token_bytes(TokenId id) const {
  const auto it = impl_->special_text.find(id);
  if (it != impl_->special_text.end()) return it->second;
  return std::string(impl_->output_bytes(id));
}

std::string Tokenizer::token_text(TokenId id) const {
  if (id < impl_->token_text.size()) return impl_->token_text[id];
  return token_bytes(id);
}

std::optional<TokenId> Tokenizer::token_id(std::string_view token_text) const {
  const auto it = impl_->text_to_id.find(std::string(token_text));
  if (it != impl_->text_to_id.end()) return it->second;
  if (impl_->token_text.empty()) {
    const TokenId id = impl_->bpe.find(token_text);
    if (id != kNoToken) return id;
  }
  return std::nullopt;
}

bool Tokenizer::is_special(TokenId id) const {
  if (impl_->special_text.count(id) != 0 || id == impl_->unk_id) return true;
  return std::binary_search(impl_->unused_ids.begin(), impl_->unused_ids.end(), id);
}

std::size_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}
std::optional<TokenId> Tokenizer::bos_id() const {
  return impl_->bos == kNoToken ? std::nullopt : std::optional<TokenId>(impl_->bos);
}
std::optional<TokenId> Tokenizer::eos_id() const {
  return impl_->eos == kNoToken ? std::nullopt : std::optional<TokenId>(impl_->eos);
}
bool Tokenizer::add_bos() const {
  return impl_->add_bos;
}
bool Tokenizer::add_eos() const {
  return impl_->add_eos;
}
const std::string& Tokenizer::chat_template() const {
  return impl_->chat_template;
}

// ---- StreamDecoder ----------------------------------------------------------------------

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

std::string StreamDecoder::push(TokenId id) {
  std::string bytes = tokenizer_.token_bytes(id);
  if (first_ && tokenizer_.impl().strip_leading_space && !bytes.empty() && bytes[0] == ' ')
    bytes.erase(0, 1);
  first_ = false;
  pending_ += bytes;
  const std::size_t ready = complete_utf8_prefix(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  out.swap(pending_);
  return out;
}

std::size_t complete_utf8_prefix(std::string_view bytes) {
  // The last lead byte, at most 3 continuation bytes back: hold it (and what follows) back
  // when its sequence is not complete yet.
  const std::size_t n = bytes.size();
  std::size_t lead = n;
  for (std::size_t back = 1; back <= 4 && back <= n; ++back) {
    if ((static_cast<unsigned char>(bytes[n - back]) & 0xC0) != 0x80) {
      lead = n - back;
      break;
    }
  }
  if (lead == n) return n;
  const auto c = static_cast<unsigned char>(bytes[lead]);
  std::size_t need = 1;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
  }
  return n - lead < need ? lead : n;
}

// ---- Loading ----------------------------------------------------------------------------

namespace {

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::make(ErrorCode::kNotFound, "tokenizer: cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> load_tokenizer(std::string_view spec) {
  Result<std::unique_ptr<TokenizerImpl>> impl = Error::make(ErrorCode::kInternal, "");
  if (spec == "cl100k_base" || spec == "o200k_base") {
    impl = load_embedded_encoding(spec);
  } else if (ends_with(spec, ".gguf")) {
    impl = load_gguf_vocab(std::string(spec));
  } else if (ends_with(spec, ".json")) {
    auto text = read_file(std::string(spec));
    if (!text) return text.error();
    impl = load_hf_tokenizer_json(std::string(spec), *text);
  } else if (ends_with(spec, ".tiktoken")) {
    auto text = read_file(std::string(spec));
    if (!text) return text.error();
    const bool o200k = spec.find("o200k") != std::string_view::npos;
    const bool gpt2 = spec.find("r50k") != std::string_view::npos ||
                      spec.find("p50k") != std::string_view::npos ||
                      spec.find("gpt2") != std::string_view::npos;
    impl = load_tiktoken_text(std::string(spec), *text,
                              o200k  ? SplitPattern::kO200k
                              : gpt2 ? SplitPattern::kGpt2
                                     : SplitPattern::kCl100k);
  } else {
    return Error::make(
        ErrorCode::kInvalidRequest,
        "tokenizer: unknown tokenizer '" + std::string(spec) +
            "' (expected cl100k_base, o200k_base, a .tiktoken, tokenizer .json or .gguf path)");
  }
  if (!impl) return std::move(impl).error();
  return std::shared_ptr<const Tokenizer>(std::make_shared<Tokenizer>(std::move(*impl)));
}

}  // namespace ferry::tokenizer
