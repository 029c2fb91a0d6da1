// Embeds the sha256-verified rank files with the assembler's .incbin: no giant array literal
// for the compiler to chew on. FERRY_TOKENIZER_DATA_DIR is set by tokenizer/CMakeLists.txt.
#include "tokenizer/embedded_data.h"

#ifndef FERRY_TOKENIZER_DATA_DIR
#error "FERRY_TOKENIZER_DATA_DIR must name the folder with the fetched *.tiktoken files"
#endif

#define FERRY_EMBED(sym, file)                       \
  asm(".pushsection .rodata\n"                       \
      ".balign 16\n"                                 \
      ".hidden " #sym                                \
      "_begin\n"                                     \
      ".globl " #sym "_begin\n" #sym                 \
      "_begin:\n"                                    \
      ".incbin \"" FERRY_TOKENIZER_DATA_DIR "/" file \
      "\"\n"                                         \
      ".hidden " #sym                                \
      "_end\n"                                       \
      ".globl " #sym "_end\n" #sym                   \
      "_end:\n"                                      \
      ".byte 0\n"                                    \
      ".popsection\n")

FERRY_EMBED(ferry_tokenizer_cl100k, "cl100k_base.tiktoken");
FERRY_EMBED(ferry_tokenizer_o200k, "o200k_base.tiktoken");

extern "C" {
extern const char ferry_tokenizer_cl100k_begin[];
extern const char ferry_tokenizer_cl100k_end[];
extern const char ferry_tokenizer_o200k_begin[];
extern const char ferry_tokenizer_o200k_end[];
}

namespace ferry::tokenizer {

std::string_view embedded_cl100k_base() {
  return {ferry_tokenizer_cl100k_begin,
          static_cast<std::size_t>(ferry_tokenizer_cl100k_end - ferry_tokenizer_cl100k_begin)};
}

std::string_view embedded_o200k_base() {
  return {ferry_tokenizer_o200k_begin,
          static_cast<std::size_t>(ferry_tokenizer_o200k_end - ferry_tokenizer_o200k_begin)};
}

}  // namespace ferry::tokenizer
