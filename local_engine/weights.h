// The engine's names for weight tensors: the kernel library's tensor types and matrix views
// (ferry_kernels does the dequantizing and the matrix products). Pure aliases; thread-safe.
#pragma once

#include "local_engine/kernels/matmul.h"
#include "model_format/tensor_type.h"

namespace ferry::engine {

using WeightType = kernels::TensorType;
// A 2-D weight: `rows` rows of `cols` elements (GGUF ne[1] x ne[0]); a 1-D tensor is one row.
using WeightView = kernels::MatrixView;

}  // namespace ferry::engine
