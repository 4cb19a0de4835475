// A compiled PCRE2 pattern (UTF + UCP, JIT when available) that splits text into its matches.
// Immutable after Compile, so one instance may be used from many threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct pcre2_real_code_8;  // pcre2.h's pcre2_code_8, kept out of this header

namespace k3::tok {

class Pcre2Regex {
 public:
  // `pattern` is PCRE2 syntax; a syntax error names the offset and PCRE2's message.
  static absl::StatusOr<Pcre2Regex> Compile(std::string_view pattern);

  // Calls `emit` with each successive non-empty match of `text`, which must be valid UTF-8
  // (it is not re-checked). Text between matches, if any, is emitted as a piece of its own so
  // nothing is lost (the tokenizer patterns match every character, so this does not happen).
  absl::Status ForEachMatch(std::string_view text,
                            absl::FunctionRef<void(std::string_view)> emit) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct CodeDeleter {
    void operator()(pcre2_real_code_8* code) const;
  };
  Pcre2Regex(std::string pattern, pcre2_real_code_8* code, bool jit);

  std::string pattern_;
  std::unique_ptr<pcre2_real_code_8, CodeDeleter> code_;
  bool jit_ = false;
};

}  // namespace k3::tok
