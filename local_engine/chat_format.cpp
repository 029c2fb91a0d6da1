#include "local_engine/chat_format.h"

namespace ferry::engine {

std::string format_single_turn_chat(std::string_view chat_template, std::string_view user) {
  const std::string text(user);
  auto has = [&](std::string_view marker) {
    return chat_template.find(marker) != std::string_view::npos;
  };
  if (has("<|start_header_id|>")) {
    return "<|start_header_id|>user<|end_header_id|>\n\n" + text +
           "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
  }
  if (has("<|user|>")) return "<|user|>\n" + text + "</s>\n<|assistant|>\n";
  if (has("[INST]")) return "[INST] " + text + " [/INST]";
  return "<|im_start|>user\n" + text + "<|im_end|>\n<|im_start|>assistant\n";
}

}  // namespace ferry::engine
