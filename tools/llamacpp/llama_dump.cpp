// Runs a GGUF file through the prebuilt llama.cpp of node-llama-cpp (libllama + its CPU backend
// variants, loaded the way node-llama-cpp loads them: default model parameters, flash attention
// "auto", one sequence) and dumps every intermediate tensor of every llama_decode call, so ferry's
// forward pass can be compared with llama.cpp's op by op (tools/llamacpp/trace_compare.py).
// Not part of the build; tools/llamacpp/build_llama_dump.sh compiles it against the headers of
// the llama.cpp source bundled with node-llama-cpp.
//
//   llama_dump MODEL.gguf IDS OUT_DIR [N_GEN] [THREADS] [BACKEND_DIR]
//
// IDS: comma-separated prompt token ids, decoded as one batch; then N_GEN greedy steps, one
// token per decode. OUT_DIR/index.txt lists "step name op type ne0 ne1 ne2 ne3 file" per
// tensor; the files hold the tensor as float32, in logical (ne0-fastest) order.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace {

struct DumpState {
  std::string dir;
  FILE* index = nullptr;
  int step = 0;
  int serial = 0;
};

float element(const ggml_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const char* p = static_cast<const char*>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] +
                  i2 * t->nb[2] + i3 * t->nb[3];
  switch (t->type) {
    case GGML_TYPE_F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case GGML_TYPE_F16: {
      ggml_fp16_t h;
      std::memcpy(&h, p, 2);
      return ggml_fp16_to_fp32(h);
    }
    case GGML_TYPE_I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<float>(v);
    }
    default:
      return 0.0f;
  }
}

bool on_eval(ggml_tensor* t, bool ask, void* user) {
  auto* st = static_cast<DumpState*>(user);
  if (ask) return true;
  const bool readable =
      t->type == GGML_TYPE_F32 || t->type == GGML_TYPE_F16 || t->type == GGML_TYPE_I32;
  if (!readable || t->data == nullptr || !ggml_backend_buffer_is_host(t->buffer)) return true;
  char file[64];
  std::snprintf(file, sizeof(file), "t%05d.bin", st->serial++);
  std::vector<float> data;
  data.reserve(static_cast<size_t>(ggml_nelements(t)));
  for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) data.push_back(element(t, i0, i1, i2, i3));
  FILE* f = std::fopen((st->dir + "/" + file).c_str(), "wb");
  if (f == nullptr) return false;
  std::fwrite(data.data(), sizeof(float), data.size(), f);
  std::fclose(f);
  std::fprintf(st->index, "%d %s %s %s %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %s\n",
               st->step, t->name[0] ? t->name : "-", ggml_op_desc(t), ggml_type_name(t->type),
               t->ne[0], t->ne[1], t->ne[2], t->ne[3], file);
  return true;
}

void log_line(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_WARN || std::getenv("LLAMA_DUMP_VERBOSE") != nullptr) {
    std::fputs(text, stderr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: llama_dump MODEL IDS OUT_DIR [N_GEN] [THREADS] [BACKEND_DIR]\n");
    return 2;
  }
  const char* model_path = argv[1];
  std::vector<llama_token> prompt;
  for (const char* p = argv[2]; *p;) {
    prompt.push_back(static_cast<llama_token>(std::strtol(p, const_cast<char**>(&p), 10)));
    if (*p == ',') ++p;
  }
  DumpState st;
  st.dir = argv[3];
  const int n_gen = argc > 4 ? std::atoi(argv[4]) : 0;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 2;
  llama_log_set(log_line, nullptr);
  if (argc > 6)
    ggml_backend_load_all_from_path(argv[6]);
  else
    ggml_backend_load_all();

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(model_path, mp);
  if (model == nullptr) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 256;
  cp.n_ubatch = 256;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.no_perf = true;
  cp.swa_full = false;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
  cp.cb_eval = on_eval;
  cp.cb_eval_user_data = &st;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) return 1;
  st.index = std::fopen((st.dir + "/index.txt").c_str(), "w");
  if (st.index == nullptr) return 1;

  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  std::vector<llama_token> tokens = prompt;
  llama_batch batch = llama_batch_get_one(tokens.data(), static_cast<int32_t>(tokens.size()));
  std::string generated;
  for (int step = 0;; ++step) {
    st.step = step;
    if (llama_decode(ctx, batch) != 0) return 1;
    const float* logits = llama_get_logits_ith(ctx, -1);
    int best = 0;
    for (int i = 1; i < n_vocab; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    generated += (generated.empty() ? "" : " ") + std::to_string(best);
    if (step >= n_gen) break;
    tokens.assign(1, best);
    batch = llama_batch_get_one(tokens.data(), 1);
  }
  std::fclose(st.index);
  std::printf("%s\n", generated.c_str());
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
