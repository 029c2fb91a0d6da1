# api/ event model: translation cost of an OpenAI chat reply into Messages and Responses.
add_executable(ferry_api_events_bench ${CMAKE_CURRENT_LIST_DIR}/api_events_bench.cpp)
target_link_libraries(ferry_api_events_bench PRIVATE ferry_api_events ferry_adapters
  benchmark::benchmark)
