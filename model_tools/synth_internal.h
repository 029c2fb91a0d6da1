// Private to model_tools/: what the synthetic-model writers share (model_tools.cpp writes the
// decoders, synth_bert.cpp the encoder). Stateless functions; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "gguf/gguf_writer.h"
#include "model_format/tensor_type.h"
#include "model_tools/model_tools.h"

namespace ferry::model_tools {

// Rows of `row_length` floats in `type`'s encoding (its reference quantizer).
std::vector<uint8_t> encode(model_format::TensorType type, const std::vector<float>& values,
                            int64_t row_length);

// A bert encoder with random weights, metadata as llama.cpp's converter writes it and a
// WordPiece vocabulary (built in, or o.vocab_from's).
Result<gguf::GgufWriter> build_synth_bert(const SynthOptions& o);
// The bert presets ("bge-small", "all-minilm-l6"); false for other names.
bool apply_bert_preset(std::string_view preset, SynthOptions& o);

}  // namespace ferry::model_tools
