// Optional dump of the forward pass's intermediate tensors, for comparing ferry op by op with
// another engine (tools/llamacpp/trace_compare.py against llama.cpp's tensors). Off unless the
// environment variable FERRY_TRACE_DIR names a directory when the process first asks; then each
// trace_tensor() call writes one float32 file there and a line to DIR/index.txt. Thread-safe
// (calls are serialised); meant for debugging runs, never for serving.
#pragma once

#include <cstdint>
#include <string_view>

namespace ferry::kernels {

// True when tracing is on (FERRY_TRACE_DIR was set at the first call).
bool trace_enabled();

// Starts a new step (one forward call); the step number is written with each tensor.
void trace_next_step();

// Writes rows x cols floats (row-major) under `name` for `layer` (-1 for none).
void trace_tensor(std::string_view name, int64_t layer, const float* data, int64_t rows,
                  int64_t cols);

}  // namespace ferry::kernels
