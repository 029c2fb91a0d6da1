# Front-ends: the CPU a Messages request translated to an OpenAI chat backend costs over the same
# request on the chat path (issue 16: at most 5 us), same run, same backend reply.
add_executable(ferry_frontend_bench ${CMAKE_CURRENT_LIST_DIR}/frontend_bench.cpp)
target_link_libraries(ferry_frontend_bench PRIVATE ferry_gateway benchmark::benchmark)
