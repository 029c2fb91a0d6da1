# Local engine probe: greedy ids, logits and (FERRY_TRACE_DIR) intermediate tensors on given
# prompt ids, for comparisons with llama.cpp (tools/llamacpp/). See bench/README.md.
add_executable(ferry_engine_probe ${CMAKE_CURRENT_LIST_DIR}/engine_probe.cpp)
target_link_libraries(ferry_engine_probe PRIVATE ferry_engine ferry_options)
