# Gateway load benchmark: ferry_loadgen drives ferry_test_upstream directly and through ferry.
# bench/gateway_bench.sh starts the servers and runs it; see bench/README.md.
add_executable(ferry_loadgen ${CMAKE_CURRENT_LIST_DIR}/loadgen.cpp)
target_link_libraries(ferry_loadgen PRIVATE ferry_options)
# The floor of any proxy here: a byte relay making only the unavoidable system calls.
add_executable(ferry_bench_relay ${CMAKE_CURRENT_LIST_DIR}/relay.cpp)
target_link_libraries(ferry_bench_relay PRIVATE ferry_options)
# The floor of a durable ledger row: a group commit's pwrite + fdatasync on this disk.
add_executable(ferry_bench_fsync ${CMAKE_CURRENT_LIST_DIR}/fsync_floor.cpp)
target_link_libraries(ferry_bench_fsync PRIVATE ferry_options)
# The load generator notices a server stopped under it (SIGSTOP) and says the run is void.
if(FERRY_BUILD_TESTS)
  add_test(NAME bench.loadgen_notices_a_stopped_server
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/loadgen_stop_test.sh $<TARGET_FILE:ferry_loadgen>
      $<TARGET_FILE:ferry_test_upstream>)
  set_tests_properties(bench.loadgen_notices_a_stopped_server PROPERTIES
    LABELS integration TIMEOUT 60)
endif()
