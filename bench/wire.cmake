# Gateway wire microbenchmarks (request parse/validate/rewrite, usage extraction).
add_executable(ferry_wire_bench ${CMAKE_CURRENT_LIST_DIR}/wire_bench.cpp)
target_link_libraries(ferry_wire_bench PRIVATE ferry_gateway benchmark::benchmark)
