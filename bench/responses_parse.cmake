# api/responses_parse: the request side of the Responses front-end against the chat parser.
add_executable(ferry_responses_parse_bench ${CMAKE_CURRENT_LIST_DIR}/responses_parse_bench.cpp)
target_link_libraries(ferry_responses_parse_bench PRIVATE ferry_api benchmark::benchmark)
