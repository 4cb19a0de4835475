// The input chunking Moonshot's tokenization_kimi.py applies before tiktoken sees the text:
// cut every 400,000 characters, then cut wherever a run of whitespace or of non-whitespace
// (Python's str.isspace) would exceed 25,000 characters. Each chunk is tokenized on its own,
// so the cuts are part of the tokenization; they also bound the regex's backtracking depth.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/functional/function_ref.h"

namespace k3::tok {

inline constexpr size_t kKimiMaxEncodeChars = 400'000;
inline constexpr size_t kKimiMaxRunChars = 25'000;

// Calls `emit` with the consecutive chunks of `text` (valid UTF-8; lengths count code points).
// An empty text gives one empty chunk, as the Python does.
void ForEachKimiChunk(std::string_view text, absl::FunctionRef<void(std::string_view)> emit,
                      size_t max_encode_chars = kKimiMaxEncodeChars,
                      size_t max_run_chars = kKimiMaxRunChars);

// Python's str.isspace for one code point.
bool IsPythonSpace(char32_t cp);

}  // namespace k3::tok
