// Pre-tokenizers by name (GGUF `tokenizer.ggml.pre`): the regex that cuts text into pieces
// before BPE, plus kimi-k2's input chunking.
//   "kimi-k2"                     Moonshot's tokenization_kimi.py pattern (Han runs; letter
//                                 classes minus Han), with its 400k / 25k-run chunking
//   "llama-bpe", "cl100k"         cl100k_base's pattern
//   "o200k", "gpt-4o"             o200k_base's pattern
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/tokenizer/pcre2_regex.h"

namespace k3::tok {

// The patterns as tiktoken spells them (Rust regex syntax); see pattern_translate.h.
inline constexpr std::string_view kKimiK2Pattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";
inline constexpr std::string_view kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// From the npm tiktoken package's encoders/o200k_base.json (pat_str).
inline constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  // Unknown names are an InvalidArgument error that names the name.
  static absl::StatusOr<PreTokenizer> Create(std::string_view name);
  // A custom tiktoken-syntax pattern (for tests and tools); no chunking.
  static absl::StatusOr<PreTokenizer> FromTiktokenPattern(std::string name,
                                                          std::string_view pat_str);

  const std::string& name() const { return name_; }
  const Pcre2Regex& regex() const { return regex_; }

  // Stage 1: cuts valid UTF-8 text into independently tokenized chunks (the whole text for all
  // but kimi-k2). Special tokens are matched within a chunk, as tokenization_kimi.py does.
  void ForEachChunk(std::string_view text, absl::FunctionRef<void(std::string_view)> emit) const;
  // Stage 2: the regex pieces of (special-free) valid UTF-8 text.
  absl::Status ForEachPiece(std::string_view text,
                            absl::FunctionRef<void(std::string_view)> emit) const;
  // Both stages, collected (convenience for tests and tools). Validates the UTF-8.
  absl::StatusOr<std::vector<std::string>> Split(std::string_view text) const;

 private:
  PreTokenizer(std::string name, Pcre2Regex regex, bool kimi_chunking)
      : name_(std::move(name)), regex_(std::move(regex)), kimi_chunking_(kimi_chunking) {}

  std::string name_;
  Pcre2Regex regex_;
  bool kimi_chunking_ = false;
};

}  // namespace k3::tok
