# Gateway load benchmark: ferry_loadgen drives ferry_test_upstream directly and through ferry.
# bench/gateway_bench.sh starts the servers and runs it; see bench/README.md.
add_executable(ferry_loadgen ${CMAKE_CURRENT_LIST_DIR}/loadgen.cpp)
target_link_libraries(ferry_loadgen PRIVATE ferry_options)
