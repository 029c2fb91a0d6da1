# Policy benchmarks: decide against a 50-rule policy, reload a 1,000-rule policy.
# See the "policies" section of bench/README.md.
add_executable(ferry_policy_bench ${CMAKE_CURRENT_LIST_DIR}/policy_bench.cpp)
target_link_libraries(ferry_policy_bench PRIVATE ferry_policies ferry_options benchmark::benchmark)
