# Constraint engine: per-step mask computation and schema compilation (bench/README.md).
if(TARGET ferry_constrain_test_vocab)
  add_executable(constrain_bench ${CMAKE_CURRENT_SOURCE_DIR}/constrain_bench.cpp)
  target_link_libraries(constrain_bench PRIVATE ferry_constrain_test_vocab ferry_options)
endif()
