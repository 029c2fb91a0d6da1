// ferry model subcommands: info (describe a GGUF file), synth (write a synthetic model),
// quantize (requantize a model, incl. the Q4_K_M / Q5_K_M mixes).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "common/progress.h"
#include "gateway/cli_commands.h"
#include "gguf/gguf_reader.h"
#include "local_engine/kernels/kernels.h"
#include "local_engine/kernels/thread_pool.h"
#include "model_tools/model_tools.h"

namespace ferry::cli {
namespace {

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= (1ull << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(n) / (1ull << 30));
  } else if (n >= (1ull << 20)) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(n) / (1ull << 20));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(n) / 1024.0);
  }
  return buf;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The tensors by type: counts, parameters, bytes.
void print_tensor_types(const gguf::GgufFile& f) {
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  uint64_t total_bytes = 0, total_params = 0;
  for (const auto& t : f.tensors()) {
    auto& e = by_type[std::string(model_format::tensor_type_name(t.type))];
    ++e.first;
    e.second += t.n_bytes;
    total_bytes += t.n_bytes;
    total_params += t.n_elements;
  }
  std::cout << "tensors:       " << f.tensors().size() << " (" << total_params << " parameters, "
            << human_bytes(total_bytes) << ")\n";
  for (const auto& [type, e] : by_type) {
    std::printf("  %-8s %5d tensors  %s\n", type.c_str(), e.first, human_bytes(e.second).c_str());
  }
}

// The vocabulary: model, sizes and special token ids.
void print_vocabulary(const gguf::GgufFile& f) {
  if (auto model = f.get_string("tokenizer.ggml.model")) {
    const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
    const gguf::Value* merges = f.find("tokenizer.ggml.merges");
    std::cout << "vocabulary:    " << *model << ", " << (tokens ? tokens->array_size() : 0)
              << " tokens, " << (merges ? merges->array_size() : 0) << " merges";
    if (auto pre = f.get_string("tokenizer.ggml.pre")) std::cout << ", pre " << *pre;
    std::cout << "\n";
    for (const char* key : {"bos_token_id", "eos_token_id", "eot_token_id", "padding_token_id"}) {
      const auto id = f.get_uint(std::string("tokenizer.ggml.") + key);
      if (!id) continue;
      std::cout << "  " << key << " = " << *id;
      if (tokens && *id < tokens->strings.size())
        std::cout << " " << gguf::Value::string(tokens->strings[*id]).to_display_string();
      std::cout << "\n";
    }
  }
}

int model_info(const std::string& path, bool list_tensors, bool all_metadata) {
  auto opened = gguf::GgufFile::open(path);
  if (!opened) {
    std::cerr << "ferry model info: " << opened.error().message << "\n";
    return 1;
  }
  const gguf::GgufFile& f = **opened;
  const std::string arch(f.architecture());
  std::cout << "file:          " << path << " (" << human_bytes(f.file_size()) << ", GGUF v"
            << f.version() << ", alignment " << f.alignment() << ")\n";
  std::cout << "architecture:  " << (arch.empty() ? "(none)" : arch) << "\n";
  if (auto name = f.get_string("general.name")) std::cout << "name:          " << *name << "\n";
  const std::pair<const char*, const char*> hparams[] = {
      {"context_length", "context"},
      {"embedding_length", "hidden"},
      {"block_count", "layers"},
      {"feed_forward_length", "ffn"},
      {"attention.head_count", "heads"},
      {"attention.head_count_kv", "kv heads"},
      {"attention.key_length", "head dim (k)"},
      {"attention.value_length", "head dim (v)"},
      {"rope.dimension_count", "rope dims"},
      {"rope.freq_base", "rope theta"},
      {"rope.scaling.type", "rope scaling"},
      {"attention.layer_norm_rms_epsilon", "rms eps"},
  };
  for (const auto& [key, label] : hparams) {
    if (const gguf::Value* v = f.find(arch + "." + key)) {
      std::printf("%-15s%s\n", (std::string(label) + ":").c_str(), v->to_display_string().c_str());
    }
  }
  print_tensor_types(f);
  print_vocabulary(f);
  if (auto tmpl = f.get_string("tokenizer.chat_template")) {
    std::cout << "chat template:\n" << *tmpl << "\n";
  } else {
    std::cout << "chat template: (none)\n";
  }
  if (all_metadata) {
    std::cout << "metadata:\n";
    for (const auto& [key, value] : f.metadata()) {
      std::cout << "  " << key << " = " << value.to_display_string() << "\n";
    }
  }
  if (list_tensors) {
    std::cout << "tensor list:\n";
    for (const auto& t : f.tensors()) {
      std::printf("  %-40s %-6s %-22s %s\n", t.name.c_str(),
                  std::string(model_format::tensor_type_name(t.type)).c_str(),
                  shape_string(t.shape).c_str(), human_bytes(t.n_bytes).c_str());
    }
  }
  return 0;
}

// ferry model info FILE
void add_info_command(CLI::App* model, int& exit_code) {
  auto info_path = std::make_shared<std::string>();
  auto info_tensors = std::make_shared<bool>(false);
  auto info_metadata = std::make_shared<bool>(false);
  CLI::App* info = model->add_subcommand(
      "info", "Architecture, shapes, tensor types, vocabulary, chat template");
  info->add_option("file", *info_path, "GGUF file")->required();
  info->add_flag("--tensors", *info_tensors, "List every tensor");
  info->add_flag("--metadata", *info_metadata, "Print every metadata key");
  info->callback(
      [=, &exit_code] { exit_code = model_info(*info_path, *info_tensors, *info_metadata); });
}

// ferry model synth ...
void add_synth_command(CLI::App* model, int& exit_code) {
  auto so = std::make_shared<model_tools::SynthOptions>();
  auto preset = std::make_shared<std::string>();
  auto synth_out = std::make_shared<std::string>();
  CLI::App* synth =
      model->add_subcommand("synth", "Write a model with random weights and a real vocabulary");
  synth
      ->add_option("--arch", so->arch,
                   "llama | qwen2 | qwen3 | smollm3 | gemma2 | gemma3 | phi3 | bert | nomic-bert")
      ->capture_default_str();
  synth->add_option("--preset", *preset,
                    "Named shape: tiny | smollm2-360m | bge-small | all-minilm-l6 (bert) (other "
                    "options override it)");
  synth->add_option("--pooling", so->pooling, "bert: mean | cls")->capture_default_str();
  synth->add_option("--embd", so->n_embd, "Hidden size")->capture_default_str();
  synth->add_option("--layers", so->n_layer, "Number of layers")->capture_default_str();
  synth->add_option("--heads", so->n_head, "Attention heads")->capture_default_str();
  synth->add_option("--kv-heads", so->n_head_kv, "Key/value heads (grouped-query attention)")
      ->capture_default_str();
  synth->add_option("--head-dim", so->head_dim, "Head size (0: embd / heads)")
      ->capture_default_str();
  synth->add_option("--ffn", so->n_ff, "Feed-forward size")->capture_default_str();
  synth->add_option("--ctx", so->n_ctx, "Context length")->capture_default_str();
  synth->add_option("--vocab", so->n_vocab, "Vocabulary size (pads the built-in vocabulary)");
  synth->add_flag("--tied", so->tied_output, "Tie the output projection to the token embedding");
  synth->add_option("--rope-theta", so->rope_theta, "RoPE base (default per architecture)");
  synth->add_option("--rms-eps", so->rms_eps, "RMSNorm epsilon (default per architecture)");
  synth->add_option("--sliding-window", so->sliding_window,
                    "gemma2/gemma3 attention window (0: 4096 / 512)");
  synth->add_option("--rope-dim", so->rope_dim, "Rotated dimensions per head (0: head size)");
  synth->add_option("--longrope-orig-ctx", so->longrope_orig_ctx,
                    "phi3: LongRoPE factors extending this original context to --ctx");
  synth->add_option("--type", so->type, "F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K Q4_K_M Q5_K_M")
      ->capture_default_str();
  synth->add_option("--vocab-from", so->vocab_from, "Copy the tokenizer from this GGUF file");
  synth->add_option("--favor", so->favor_token,
                    "A token the model prefers everywhere (e.g. \"<tool_call>\"; untied output)");
  synth->add_option("--seed", so->seed, "Random seed")->capture_default_str();
  synth->add_option("--name", so->name, "general.name");
  synth->add_option("out", *synth_out, "Output GGUF file")->required();
  synth->callback([=, &exit_code] {
    model_tools::SynthOptions options = *so;
    if (!preset->empty()) {
      // The preset sets the shape; explicitly given options win.
      model_tools::SynthOptions base = options;
      if (!model_tools::apply_synth_preset(*preset, base)) {
        std::cerr << "ferry model synth: unknown preset '" << *preset << "'\n";
        exit_code = 2;
        return;
      }
      auto given = [&](const char* name) { return synth->count(name) > 0; };
      if (!given("--arch")) options.arch = base.arch;
      if (!given("--pooling")) options.pooling = base.pooling;
      if (!given("--embd")) options.n_embd = base.n_embd;
      if (!given("--layers")) options.n_layer = base.n_layer;
      if (!given("--heads")) options.n_head = base.n_head;
      if (!given("--kv-heads")) options.n_head_kv = base.n_head_kv;
      if (!given("--head-dim")) options.head_dim = base.head_dim;
      if (!given("--ffn")) options.n_ff = base.n_ff;
      if (!given("--ctx")) options.n_ctx = base.n_ctx;
      if (!given("--vocab")) options.n_vocab = base.n_vocab;
      if (!given("--tied")) options.tied_output = base.tied_output;
      if (!given("--rope-theta")) options.rope_theta = base.rope_theta;
      if (!given("--name")) options.name = base.name;
    }
    Progress progress("ferry model synth: tensors", 0);
    options.progress = [&](uint64_t done, uint64_t total) {
      progress.set_total(total);
      progress.update(done);
    };
    Status s = model_tools::write_synth_model(options, *synth_out);
    progress.finish();
    if (!s) {
      std::cerr << "ferry model synth: " << s.error().message << "\n";
      exit_code = 1;
      return;
    }
    std::cerr << "wrote " << *synth_out << "\n";
  });
}

// ferry model quantize IN OUT TYPE
void add_quantize_command(CLI::App* model, int& exit_code) {
  auto q_in = std::make_shared<std::string>();
  auto q_out = std::make_shared<std::string>();
  auto q_type = std::make_shared<std::string>();
  auto q_threads = std::make_shared<int>(0);
  CLI::App* quant = model->add_subcommand(
      "quantize", "Requantize a model: Q8_0 Q4_0 Q4_K Q5_K Q6_K Q4_K_M Q5_K_M F16 BF16 F32");
  quant->add_option("in", *q_in, "Input GGUF file")->required();
  quant->add_option("out", *q_out, "Output GGUF file")->required();
  quant->add_option("type", *q_type, "Target type or mix")->required();
  quant->add_option("--threads", *q_threads, "Threads (0: all cores)");
  quant->callback([=, &exit_code] {
    const auto target = model_tools::parse_quant_target(*q_type);
    if (!target) {
      std::cerr << "ferry model quantize: unknown or unsupported type '" << *q_type << "'\n";
      exit_code = 2;
      return;
    }
    kernels::ThreadPool pool(*q_threads);
    Progress progress("ferry model quantize: bytes", 0);
    Status s = model_tools::quantize_model(*q_in, *q_out, *target, &pool,
                                           [&](uint64_t done, uint64_t total) {
                                             progress.set_total(total);
                                             progress.update(done);
                                           });
    progress.finish();
    if (!s) {
      std::cerr << "ferry model quantize: " << s.error().message << "\n";
      exit_code = 1;
      return;
    }
    std::cerr << "wrote " << *q_out << " (" << target->name << ")\n";
  });
}

}  // namespace

void add_model_commands(CLI::App& app, int& exit_code) {
  CLI::App* model = app.add_subcommand("model", "Inspect, synthesize and quantize GGUF models");
  model->require_subcommand(1);
  add_info_command(model, exit_code);
  add_synth_command(model, exit_code);
  add_quantize_command(model, exit_code);
}

}  // namespace ferry::cli
