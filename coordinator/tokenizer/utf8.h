// UTF-8 validation and lossy repair, following Unicode's "well-formed byte sequences" table.
// Ill-formed input is replaced one maximal subpart per U+FFFD (the WHATWG / Unicode 3.9 rule),
// so a streaming decoder and a whole-buffer decoder give the same text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace k3::tok {

struct Utf8Step {
  enum class Kind {
    kValid,       // `len` bytes form one code point `cp`
    kIncomplete,  // all `len` bytes (to the end of the input) are a valid prefix of a character
    kInvalid,     // `len` bytes (the maximal subpart, >= 1) can never start a character
  };
  Kind kind;
  size_t len;
  char32_t cp;  // only for kValid
};

// Examines the character starting at s[0]; `s` must not be empty.
Utf8Step DecodeUtf8Step(std::string_view s);

// Offset of the first byte that is not part of a well-formed character, or npos when all are.
size_t FindInvalidUtf8(std::string_view s);
inline bool IsValidUtf8(std::string_view s) { return FindInvalidUtf8(s) == std::string_view::npos; }

// `s` with each maximal ill-formed subpart (including a truncated tail) replaced by U+FFFD.
std::string ToValidUtf8(std::string_view s);

void AppendUtf8(char32_t cp, std::string* out);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

}  // namespace k3::tok
