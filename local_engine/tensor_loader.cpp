#include "local_engine/tensor_loader.h"

#include <utility>

#include "local_engine/kernels/kernels.h"

namespace ferry::engine {

Error load_error(std::string message) {
  return Error::make(ErrorCode::kInvalidRequest, "model: " + std::move(message));
}

Result<WeightView> TensorLoader::get(const std::string& name, int64_t cols, int64_t rows,
                                     bool optional) const {
  const SourceTensor* t = source_.tensor(name);
  if (t == nullptr) {
    if (optional) return WeightView{};
    return load_error("missing tensor '" + name + "'");
  }
  const auto type = static_cast<WeightType>(t->ggml_type);
  if (!kernels::tensor_type_known(t->ggml_type) || !kernels::tensor_type_runs(type)) {
    const std::string_view type_name = kernels::tensor_type_name(type);
    return load_error("tensor '" + name + "' has unsupported type " +
                      (type_name == "?" ? std::to_string(t->ggml_type) : std::string(type_name)));
  }
  const bool is_1d = rows == 0;
  const size_t want_dims = is_1d ? 1 : 2;
  bool shape_ok =
      t->dims.size() >= want_dims && t->dims[0] == cols && (is_1d || t->dims[1] == rows);
  for (size_t i = want_dims; shape_ok && i < t->dims.size(); ++i) shape_ok = t->dims[i] == 1;
  if (!shape_ok) {
    std::string got;
    for (int64_t d : t->dims) got += (got.empty() ? "" : "x") + std::to_string(d);
    return load_error("tensor '" + name + "' has shape [" + got + "], expected [" +
                      std::to_string(cols) + (is_1d ? "" : "x" + std::to_string(rows)) + "]");
  }
  WeightView view;
  view.type = type;
  view.cols = cols;
  view.rows = is_1d ? 1 : rows;
  view.row_bytes = static_cast<size_t>(kernels::row_bytes(type, cols).value_or(0));
  if (view.row_bytes == 0) {
    return load_error("tensor '" + name + "': row of " + std::to_string(cols) +
                      " elements is not a whole number of " +
                      std::string(kernels::tensor_type_name(type)) + " blocks");
  }
  if (t->data == nullptr || t->n_bytes < view.row_bytes * static_cast<size_t>(view.rows)) {
    return load_error("tensor '" + name + "' is shorter than its shape");
  }
  view.data = t->data;
  return view;
}

Result<WeightView> TensorLoader::get_f32(const std::string& name, int64_t n, bool optional) const {
  auto view = get(name, n, 0, optional);
  if (!view) return view;
  if (view->data != nullptr && view->type != WeightType::kF32) {
    return load_error("tensor '" + name + "' must be F32, is " +
                      std::string(kernels::tensor_type_name(view->type)));
  }
  return view;
}

}  // namespace ferry::engine
