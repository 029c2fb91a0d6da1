# Ledger benchmarks: durable rows/s through the real writer, report over many rows, CPU per
# request on the gateway path. See the "ledger" section of bench/README.md.
add_executable(ferry_ledger_bench ${CMAKE_CURRENT_LIST_DIR}/ledger_bench.cpp)
target_link_libraries(ferry_ledger_bench PRIVATE ferry_ledger ferry_options Threads::Threads)
