// A vocabulary in GGUF form (llama.cpp's "gpt2" tokenizer model).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace k3::tok {

// tokenizer.ggml.token_type values (llama.cpp's numbering).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,       // BPE token; its string is written through GPT-2's byte->unicode map
  kUnknown = 2,
  kControl = 3,      // special: literal text (e.g. <|im_end|>)
  kUserDefined = 4,  // special: literal text
  kUnused = 5,       // a placeholder id (e.g. "[PAD123]"); never produced, decodes to nothing
  kByte = 6,
};

struct VocabSpec {
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens, index = id = BPE rank
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type; empty means all normal
  std::string pre;                   // tokenizer.ggml.pre
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  std::optional<int32_t> pad_id;
};

}  // namespace k3::tok
