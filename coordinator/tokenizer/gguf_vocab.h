// The tokenizer from GGUF metadata (llama.cpp's keys): tokenizer.ggml.model (must be "gpt2"),
// .pre, .tokens, .token_type, .bos_token_id / .eos_token_id / .padding_token_id.
// A separate library (k3_tokenizer_gguf) so k3_tokenizer itself does not need the GGUF reader.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "coordinator/tokenizer/vocab.h"
#include "worker/gguf/gguf_file.h"

namespace k3::tok {

// A file with tokenizer.ggml.model = "no_vocab" is a FailedPrecondition error saying so.
absl::StatusOr<VocabSpec> VocabFromGguf(const gguf::GgufFile& file);
absl::StatusOr<Tokenizer> TokenizerFromGguf(const gguf::GgufFile& file);
// Opens `path` (tensor data not needed) and reads its tokenizer.
absl::StatusOr<Tokenizer> TokenizerFromGgufPath(const std::string& path);

}  // namespace k3::tok
