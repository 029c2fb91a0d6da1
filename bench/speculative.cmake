# Speculative decoding by prompt lookup against plain decoding, through the scheduler, on the
# demo model (same run, alternating). Run: build/bench/ferry_speculative_bench (see its header).
add_executable(ferry_speculative_bench ${CMAKE_CURRENT_LIST_DIR}/speculative_bench.cpp)
target_link_libraries(ferry_speculative_bench PRIVATE ferry_engine ferry_tokenizer ferry_options)
