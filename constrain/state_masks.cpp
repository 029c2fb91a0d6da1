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
  const std::size_t size =
      64 + entry->accepted.size() * sizeof(std::uint64_t) +
      (entry->accepted_ids.size() + entry->uncertain.size()) * sizeof(tokenizer::TokenId);
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes_ + size > kMaxBytes) return;  // full: the walk is done each time instead
  if (by_vocab_[vocab].emplace(key, std::move(entry)).second) bytes_ += size;
}

bool StateMasks::claim_prepare(std::uint64_t vocab) {
  std::lock_guard<std::mutex> lock(mu_);
  return prepared_.emplace(vocab, true).second;
}

std::size_t StateMasks::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace ferry::constrain
