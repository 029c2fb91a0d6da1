// Tensor views of a ModelSource by name, each checked against the shape the forward pass reads
// (decoders: model.cpp; encoders: encoder.cpp), and the loaders' error. Internal to
// local_engine/.
#pragma once

#include <string>

#include "common/error.h"
#include "local_engine/model_source.h"
#include "local_engine/weights.h"

namespace ferry::engine {

// kInvalidRequest, "model: " + message.
Error load_error(std::string message);

class TensorLoader {
 public:
  explicit TensorLoader(const ModelSource& source) : source_(source) {}

  // A tensor with exactly the given shape (cols, rows); rows == 0 means 1-D of `cols`. A
  // missing optional tensor is an empty view (data nullptr).
  Result<WeightView> get(const std::string& name, int64_t cols, int64_t rows,
                         bool optional = false) const;
  bool has(const std::string& name) const { return source_.tensor(name) != nullptr; }
  // Norm weights and biases, which the forward passes use as float vectors: 1-D and F32.
  Result<WeightView> get_f32(const std::string& name, int64_t n, bool optional = false) const;

 private:
  const ModelSource& source_;
};

// Assigns `expr`'s view to `dst`, or returns its error from the enclosing function.
#define FERRY_LOAD(dst, expr)                      \
  do {                                             \
    auto loaded = (expr);                          \
    if (!loaded) return std::move(loaded).error(); \
    (dst) = loaded.value();                        \
  } while (0)

}  // namespace ferry::engine
