# Kernel benchmarks (matmul GB/s and GFLOP/s on SmolLM2-360M-shaped layers). See bench/README.md.
add_executable(ferry_kernels_bench ${CMAKE_CURRENT_LIST_DIR}/kernels_bench.cpp)
target_link_libraries(ferry_kernels_bench PRIVATE ferry_kernels ferry_options benchmark::benchmark)
target_compile_options(ferry_kernels_bench PRIVATE -O3)
