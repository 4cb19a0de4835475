// The K3 tokenizer: tiktoken-style byte-level BPE over ranks with named pre-tokenizers and
// literal special tokens. Immutable once built; Encode/Decode may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/vocab.h"

namespace k3::tok {

class PreTokenizer;

class Tokenizer {
 public:
  // Builds from a GGUF-form vocabulary. Normal tokens are byte-decoded and must be distinct and
  // include all 256 single bytes; control / user-defined tokens are the special tokens.
  static absl::StatusOr<Tokenizer> FromVocab(const VocabSpec& spec);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text (valid UTF-8, else InvalidArgument naming the byte) -> ids. With allow_special,
  // special-token texts in the input become their ids; without, they are ordinary text.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool allow_special = false) const;

  // Ids -> bytes (not necessarily valid UTF-8: a token may hold part of a character).
  // include_special = false drops control / user-defined tokens. Unknown ids are an error.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids,
                                     bool include_special = true) const;

  // The bytes one id stands for (the literal text for a special token; empty for an unused one).
  absl::StatusOr<std::string_view> TokenBytes(int32_t id) const;
  bool IsSpecial(int32_t id) const;  // control or user-defined (false for unknown ids)
  std::optional<int32_t> SpecialTokenId(std::string_view text) const;

  int32_t vocab_size() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;
  const PreTokenizer& pre_tokenizer() const;

 private:
  struct State;
  explicit Tokenizer(std::unique_ptr<const State> state);
  absl::Status EncodeOrdinary(std::string_view text, std::vector<int32_t>* ids) const;

  std::unique_ptr<const State> s_;
};

}  // namespace k3::tok
