// ferry tokenize: counts (or lists) the tokens of a text or of an OpenAI chat request with a
// model's tokenizer. Single-threaded CLI code.
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "gateway/cli_commands.h"
#include "gateway/prompt_count.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string input = "-";
  std::string chat_template_file;
  bool ids = false;
  bool chat = false;
  bool no_generation_prompt = false;
  bool render = false;
  bool raw = false;
};

bool read_input(const std::string& input, std::string& out) {
  if (input == "-") {
    out.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return true;
  }
  std::ifstream in(input, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

int run_tokenize(const TokenizeOptions& o) {
  auto tok = tokenizer::load_tokenizer(o.tokenizer);
  if (!tok) {
    std::cerr << "ferry tokenize: " << tok.error().message << "\n";
    return 2;
  }
  std::string text;
  if (!read_input(o.input, text)) {
    std::cerr << "ferry tokenize: cannot read '" << o.input << "'\n";
    return 2;
  }
  if (o.chat) {
    std::string template_source;
    if (!o.chat_template_file.empty() && !read_input(o.chat_template_file, template_source)) {
      std::cerr << "ferry tokenize: cannot read '" << o.chat_template_file << "'\n";
      return 2;
    }
    auto fmt = tokenizer::ChatFormatter::create(*tok, template_source);
    if (!fmt) {
      std::cerr << "ferry tokenize: " << fmt.error().message << "\n";
      return 2;
    }
    const auto request = gateway::count_input(/*chat_request=*/true, text);  // as the server
    if (request.is_discarded()) {
      std::cerr
          << "ferry tokenize: the input is not JSON (an OpenAI messages array or chat request)\n";
      return 2;
    }
    const bool gen = !o.no_generation_prompt;
    if (o.render || o.ids) {
      auto rendered = (*fmt)->render(request, gen);
      if (!rendered) {
        std::cerr << "ferry tokenize: " << rendered.error().message << "\n";
        return 1;
      }
      if (o.render) {
        std::cout << *rendered;
        return 0;
      }
      text = std::move(*rendered);
    } else {
      auto n = (*fmt)->count(request, gen);
      if (!n) {
        std::cerr << "ferry tokenize: " << n.error().message << "\n";
        return 1;
      }
      std::cout << *n << "\n";
      return 0;
    }
  }
  // As the server counts a prompt (tokenizer::encode_prompt: specials parsed, BOS when the
  // vocabulary adds one), unless --raw asks for the text alone.
  std::vector<tokenizer::TokenId> ids;
  if (o.raw) {
    (*tok)->encode(text, ids, tokenizer::Specials::kAsText);
  } else {
    tokenizer::encode_prompt(**tok, text, ids);
  }
  if (o.ids) {
    std::string line;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (i) line.push_back(' ');
      line += std::to_string(ids[i]);
    }
    std::cout << line << "\n";
  } else {
    std::cout << ids.size() << "\n";
  }
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Count the tokens of a text (or a chat) for a model's tokenizer");
  cmd->add_option("--tokenizer", opts->tokenizer,
                  "cl100k_base, o200k_base, or a .tiktoken, tokenizer.json or .gguf path")
      ->required();
  cmd->add_flag("--ids", opts->ids,
                "Print the token ids (space-separated, one line) instead of the count");
  cmd->add_flag(
      "--chat", opts->chat,
      "The input is an OpenAI messages array or chat request: render the model's chat template");
  cmd->add_option("--chat-template", opts->chat_template_file,
                  "With --chat: a Jinja template file to use");
  cmd->add_flag("--no-generation-prompt", opts->no_generation_prompt,
                "With --chat: no add_generation_prompt");
  cmd->add_flag("--render", opts->render,
                "With --chat: print the rendered prompt instead of counting");
  cmd->add_flag("--raw", opts->raw,
                "Count the text alone: no BOS, special-token text as ordinary text "
                "(default: as the server counts a prompt)");
  cmd->add_option("input", opts->input, "Text file to read, or - for stdin (default)");
  cmd->callback([opts, &exit_code] { exit_code = run_tokenize(*opts); });
}

}  // namespace ferry::cli
