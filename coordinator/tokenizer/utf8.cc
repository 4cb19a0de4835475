#include "coordinator/tokenizer/utf8.h"

#include <cstdint>

namespace k3::tok {

Utf8Step DecodeUtf8Step(std::string_view s) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return {Utf8Step::Kind::kValid, 1, b0};

  size_t need;        // continuation bytes after the lead byte
  uint8_t lo = 0x80;  // allowed range of the first continuation byte
  uint8_t hi = 0xBF;
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Step::Kind::kInvalid, 1, 0};  // stray continuation, C0/C1, F5..FF
  }
  for (size_t k = 1; k <= need; ++k) {
    if (k >= s.size()) return {Utf8Step::Kind::kIncomplete, s.size(), 0};
    const auto b = static_cast<uint8_t>(s[k]);
    if (b < lo || b > hi) return {Utf8Step::Kind::kInvalid, k, 0};
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Step::Kind::kValid, need + 1, cp};
}

size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path.
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step step = DecodeUtf8Step(s.substr(i));
    if (step.kind != Utf8Step::Kind::kValid) return i;
    i += step.len;
  }
  return std::string_view::npos;
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Step step = DecodeUtf8Step(s.substr(i));
    if (step.kind == Utf8Step::Kind::kValid) {
      out.append(s.substr(i, step.len));
    } else {
      out.append(kReplacementChar);
    }
    i += step.len;
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace k3::tok
