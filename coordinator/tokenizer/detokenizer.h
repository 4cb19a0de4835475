// Streaming detokenization: feed ids one at a time, get back only complete UTF-8 text.
// Bytes of a character split across tokens are held until the character completes; bytes that
// can never form a character become U+FFFD at once, and a character still incomplete at
// Finish() becomes one U+FFFD. The concatenated output equals ToValidUtf8(Decode(ids)).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace k3::tok {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool include_special = true)
      : tokenizer_(&tokenizer), include_special_(include_special) {}

  // The text that became complete with `id` (often empty). Unknown ids are an error and
  // leave the state unchanged.
  absl::StatusOr<std::string> Feed(int32_t id);
  // Whatever is held back, as U+FFFD; the detokenizer is then empty and may be reused.
  std::string Finish();

  // Bytes held back (at most 3: a proper prefix of one character).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool include_special_;
  std::string pending_;
};

}  // namespace k3::tok
