# Serving throughput of the local engine's scheduler (continuous batching, prefix cache) on a
# synthesized SmolLM2-360M-shaped model. Run: build/bench/ferry_serving_bench (see its header).
add_executable(ferry_serving_bench ${CMAKE_CURRENT_LIST_DIR}/serving_bench.cpp)
target_link_libraries(ferry_serving_bench PRIVATE ferry_engine ferry_model_tools ferry_options)
