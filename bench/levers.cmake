# Cost levers: a response-cache hit's CPU against the pass-through path of the same request, same
# run (issue 19: no more); trimming a 50-turn conversation with the demo model's tokenizer and
# template (issue 19: <= 20 us).
add_executable(ferry_levers_bench ${CMAKE_CURRENT_LIST_DIR}/levers_bench.cpp)
target_link_libraries(ferry_levers_bench PRIVATE ferry_gateway ferry_tokenizer benchmark::benchmark)
target_compile_definitions(ferry_levers_bench PRIVATE
  FERRY_DEMO_MODEL="${PROJECT_SOURCE_DIR}/models/ferry-demo-1m.gguf")
