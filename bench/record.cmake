# Per-request bookkeeping after the answer: metrics updates, the access-log line and its hand-off,
# the request id. Compiles metrics.cpp, access_log.cpp and request_record.cpp itself rather
# than linking ferry_gateway, so building it never compiles the Beast-heavy server.cpp.
add_executable(ferry_record_bench ${CMAKE_CURRENT_LIST_DIR}/record_bench.cpp
  ${PROJECT_SOURCE_DIR}/gateway/metrics.cpp ${PROJECT_SOURCE_DIR}/gateway/access_log.cpp
  ${PROJECT_SOURCE_DIR}/gateway/request_record.cpp)
target_link_libraries(ferry_record_bench PRIVATE ferry_adapters ferry_common ferry_options
  benchmark::benchmark Threads::Threads)
