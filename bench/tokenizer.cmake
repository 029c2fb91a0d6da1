# Tokenizer throughput against OpenAI's tiktoken: see bench/tokenizer_compare.sh.
add_executable(tokenizer_bench ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_bench.cpp)
target_link_libraries(tokenizer_bench PRIVATE ferry_tokenizer ferry_options)
