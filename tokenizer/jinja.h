// A small Jinja interpreter: the subset the chat templates of Llama 3.x, Qwen2.5/3, SmolLM2,
// Mistral, Phi-3 and Gemma use (if/for/set/macro, namespace, loop.*, filters, tests, string
// and dict methods), with trim_blocks/lstrip_blocks as HF applies them. A parsed Template is
// immutable; render() is const and thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"

namespace ferry::tokenizer::jinja {

struct Node;

class Template {
 public:
  // Parses the source; syntax errors and unknown statements are errors here, at load time.
  static Result<Template> parse(std::string_view source);
  // Renders with the JSON object's members as variables. raise_exception() and type errors
  // come back as errors.
  Result<std::string> render(const nlohmann::ordered_json& context) const;
  // The same with the variables given one by one (a later one of the same name wins), so that
  // a caller need not copy its JSON into one object. The JSON must outlive the call: strings
  // are read in place. `size_hint`: the expected length of the output.
  struct Variable {
    std::string_view name;
    const nlohmann::ordered_json* value;
  };
  Result<std::string> render(std::span<const Variable> variables, std::size_t size_hint = 0) const;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace ferry::tokenizer::jinja
