# The console's pages over a big ledger: each page's ledger function timed as a ratio to a full
# scan of the rows in the same run. See the "console" section of bench/README.md.
add_executable(ferry_console_bench ${CMAKE_CURRENT_LIST_DIR}/console_bench.cpp)
target_link_libraries(ferry_console_bench PRIVATE ferry_ledger ferry_options Threads::Threads)
