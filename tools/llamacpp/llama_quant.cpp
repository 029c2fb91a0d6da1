// Quantizes a GGUF file with the prebuilt llama.cpp of node-llama-cpp (llama_model_quantize in
// libllama, the function llama-quantize calls), so ferry's `model quantize` can be compared with
// llama-quantize's per-tensor type choices and file sizes without building llama.cpp.
// Not part of the build; tools/llamacpp/build_llama_dump.sh compiles it next to llama_dump.
//
//   llama_quant IN.gguf OUT.gguf FTYPE [THREADS]
//
// FTYPE: F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_M Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL
// IQ4_XS (an importance matrix is not passed: llama.cpp refuses none of these without one).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "llama.h"

namespace {

struct FtypeName {
  const char* name;
  llama_ftype ftype;
};

const FtypeName kFtypes[] = {
    {"F16", LLAMA_FTYPE_MOSTLY_F16},       {"BF16", LLAMA_FTYPE_MOSTLY_BF16},
    {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},     {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},
    {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},     {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},
    {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},     {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K},
    {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M}, {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S},
    {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S},
    {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M}, {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},
    {"IQ4_NL", LLAMA_FTYPE_MOSTLY_IQ4_NL}, {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: llama_quant IN.gguf OUT.gguf FTYPE [THREADS]\n");
    return 2;
  }
  llama_model_quantize_params params = llama_model_quantize_default_params();
  bool found = false;
  for (const FtypeName& f : kFtypes) {
    if (std::strcmp(f.name, argv[3]) == 0) {
      params.ftype = f.ftype;
      found = true;
    }
  }
  if (!found) {
    std::fprintf(stderr, "llama_quant: unknown type %s\n", argv[3]);
    return 2;
  }
  params.nthread = argc > 4 ? std::atoi(argv[4]) : 2;
  llama_backend_init();
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &params);
  llama_backend_free();
  if (rc != 0) {
    std::fprintf(stderr, "llama_quant: failed (%u)\n", rc);
    return 1;
  }
  return 0;
}
