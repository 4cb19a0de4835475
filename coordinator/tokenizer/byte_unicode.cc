#include "coordinator/tokenizer/byte_unicode.h"

#include <array>
#include <cstdint>

#include "absl/strings/str_format.h"
#include "coordinator/tokenizer/utf8.h"

namespace k3::tok {
namespace {

constexpr bool StandsForItself(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr int kNumShifted = 68;  // bytes that do not stand for themselves

constexpr std::array<char32_t, 256> kByteToCp = [] {
  std::array<char32_t, 256> t{};
  char32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) t[b] = StandsForItself(b) ? b : next++;
  return t;
}();

constexpr std::array<uint8_t, kNumShifted> kShiftedToByte = [] {
  std::array<uint8_t, kNumShifted> t{};
  int n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    if (!StandsForItself(b)) t[n++] = static_cast<uint8_t>(b);
  }
  return t;
}();

}  // namespace

std::string BytesToGgufToken(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(kByteToCp[static_cast<uint8_t>(c)], &out);
  return out;
}

absl::StatusOr<std::string> GgufTokenToBytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const Utf8Step step = DecodeUtf8Step(token.substr(i));
    if (step.kind != Utf8Step::Kind::kValid) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token string is not valid UTF-8 at byte %d", i));
    }
    const char32_t cp = step.cp;
    if (cp < 256 && StandsForItself(cp)) {
      out.push_back(static_cast<char>(cp));
    } else if (cp >= 256 && cp < 256 + kNumShifted) {
      out.push_back(static_cast<char>(kShiftedToByte[cp - 256]));
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "character U+%04X at byte %d is not in GPT-2's byte-level alphabet", cp, i));
    }
    i += step.len;
  }
  return out;
}

}  // namespace k3::tok
