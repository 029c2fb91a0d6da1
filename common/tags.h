// The trusted tags ferry gives ledger rows itself. A key's tags and a policy rule's tags may not
// name them (the config loader, the policy loader and stored-key creation refuse them), or the
// reports would count the requests carrying them wrongly.
#pragma once

#include <string_view>

namespace ferry {

// A shadow copy's row (gateway/recorder.cpp); reports count these apart from served requests.
inline constexpr std::string_view kShadowTag = "shadow";

}  // namespace ferry
