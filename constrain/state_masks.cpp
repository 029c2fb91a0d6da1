#include "constrain/state_masks.h"

namespace ferry::constrain {

std::shared_ptr<const StateMasks::Entry> StateMasks::find(std::uint64_t vocab,
                                                          std::uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto v = by_vocab_.find(vocab);
  if (v == by_vocab_.end()) return nullptr;
  const auto e = v->second.find(key);
  return e == v->second.end() ? nullptr : e->second;
}

void StateMasks::insert(std::uint64_t vocab, std::uint64_t key,
                        std::shared_ptr<const Entry> entry) {
  const std::size_t size = 64 + entry->accepted.size() * sizeof(std::uint64_t) +
                           entry->uncertain.size() * sizeof(tokenizer::TokenId);
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes_ + size > kMaxBytes) return;  // full: the walk is done each time instead
  auto [it, added] = by_vocab_[vocab].emplace(key, entry);
  if (added) {
    bytes_ += size;
  } else if (it->second->pending && !entry->pending) {
    it->second = std::move(entry);
    bytes_ += size;
  }
}

std::shared_ptr<const StateMasks::Context> StateMasks::find_context(
    std::uint64_t vocab, std::uint64_t hash, const std::vector<std::uint32_t>& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto v = contexts_.find(vocab);
  if (v == contexts_.end()) return nullptr;
  const auto c = v->second.find(hash);
  return c == v->second.end() || c->second->key != key ? nullptr : c->second;
}

void StateMasks::insert_context(std::uint64_t vocab, std::uint64_t hash,
                                std::shared_ptr<const Context> context) {
  const std::size_t size = 96 + context->key.size() * sizeof(std::uint32_t) +
                           context->tokens.size() * sizeof(context->tokens[0]);
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes_ + size > kMaxBytes) return;  // full: the walk is done each time instead
  // A hash collision keeps the first context (the other is then computed each time).
  if (contexts_[vocab].emplace(hash, std::move(context)).second) bytes_ += size;
}

std::size_t StateMasks::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace ferry::constrain
