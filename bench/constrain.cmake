# Constraint engine: per-step mask computation and schema compilation (bench/README.md).
if(TARGET ferry_constrain_test_vocab)
  add_executable(constrain_bench ${CMAKE_CURRENT_SOURCE_DIR}/constrain_bench.cpp)
  target_link_libraries(constrain_bench PRIVATE ferry_constrain_test_vocab ferry_options)
  # Decode throughput with and without a constraint, same model and threads (bench/README.md).
  add_executable(constrain_decode_bench ${CMAKE_CURRENT_SOURCE_DIR}/constrain_decode_bench.cpp)
  target_link_libraries(constrain_decode_bench PRIVATE ferry_engine ferry_constrain
    ferry_model_tools ferry_tokenizer ferry_constrain_test_vocab ferry_options)
endif()
