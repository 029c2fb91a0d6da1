# Embeddings through the local engine's scheduler vs the engine's own prefill, same model and
# batch, same run. Run: build/bench/ferry_embeddings_bench (see its header and bench/README.md).
add_executable(ferry_embeddings_bench ${CMAKE_CURRENT_LIST_DIR}/embeddings_bench.cpp)
target_link_libraries(ferry_embeddings_bench PRIVATE ferry_engine ferry_model_tools ferry_options)
