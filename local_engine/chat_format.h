// A minimal chat prompt for `ferry engine generate --chat`: recognises the template family
// of a model's chat template (ChatML, Llama 3, Llama 2 [INST], Zephyr) and wraps one user
// message the way that family does. Pure function; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace ferry::engine {

// The prompt text (special tokens spelled out, to be encoded with specials parsed) for one
// user message followed by the assistant's turn. Unknown templates fall back to ChatML.
std::string format_single_turn_chat(std::string_view chat_template, std::string_view user);

}  // namespace ferry::engine
