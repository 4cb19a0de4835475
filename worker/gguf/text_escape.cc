#include "worker/gguf/text_escape.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace k3::gguf {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not valid.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  size_t len = 0;
  uint32_t min_cp = 0;
  if (b0 < 0x80) return 1;
  if ((b0 & 0xE0) == 0xC0)
    len = 2, min_cp = 0x80;
  else if ((b0 & 0xF0) == 0xE0)
    len = 3, min_cp = 0x800;
  else if ((b0 & 0xF8) == 0xF0)
    len = 4, min_cp = 0x10000;
  else
    return 0;
  if (i + len > s.size()) return 0;
  uint32_t cp = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and out-of-range code points are not valid UTF-8.
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// The escapes both quoted forms write the same way, or nullptr.
const char* ShortEscape(char c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    default:
      return nullptr;
  }
}

}  // namespace

std::string QuoteForDisplay(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<uint8_t>(c);
    if (const char* e = ShortEscape(c)) {
      out += e;
    } else if (u < 0x20 || u == 0x7F) {
      out += absl::StrFormat("\\x%02x", u);
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  size_t i = 0;
  while (i < s.size()) {
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (len > 1) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    const char c = s[i++];
    if (const char* e = ShortEscape(c)) {
      out += e;
    } else if (static_cast<uint8_t>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<uint8_t>(c));
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

}  // namespace k3::gguf
