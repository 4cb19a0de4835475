// Rewrites a tiktoken `pat_str` (Rust regex / fancy-regex syntax) into the PCRE2 pattern that
// matches the same text under PCRE2_UTF | PCRE2_UCP. Three things differ between the engines:
//   \s         Rust: the White_Space property. PCRE2 (UCP): \p{Z}, \h, \v, which adds U+180E.
//              -> an explicit White_Space class.
//   \p{Han}    Rust: the Script property. PCRE2: a bare script name means Script_Extensions,
//              which adds e.g. the ideographic full stop U+3002.  -> \p{sc:Han}
//   [A&&[^B]]  class intersection (Rust only).  -> (?:(?![B])[A])   ([A&&[B]] -> (?:(?=[B])[A]))
// Anything else passes through; constructs it cannot translate (\S inside a class, other nested
// classes) are an error rather than a silent difference.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace k3::tok {

absl::StatusOr<std::string> TiktokenPatternToPcre2(std::string_view pat);

}  // namespace k3::tok
