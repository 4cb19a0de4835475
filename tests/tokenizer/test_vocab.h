// A small hand-made vocabulary for the unit tests (the real ones come from npm tiktoken).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/tokenizer/byte_unicode.h"
#include "coordinator/tokenizer/vocab.h"

namespace k3::tok::testing {

// Ids 0..255: the single bytes. Then merges in rank order, one unused id, then specials.
inline const std::vector<std::string>& SmallMerges() {
  static const std::vector<std::string> merges = {
      "he", "ll", "llo", "hello", " w", "or", "ld", " wor", " world", "  ", "    ",
      "\xE4\xB8", "\xE4\xB8\xAD",  // 中
      "\xE6\x96", "\xE6\x96\x87",  // 文
      "\xE4\xB8\xAD\xE6\x96\x87",  // 中文
      "ab", "bc", "abc", "aa",
  };
  return merges;
}
inline constexpr int32_t kFirstMerge = 256;
inline int32_t MergeId(const std::string& bytes) {
  const auto& m = SmallMerges();
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i] == bytes) return kFirstMerge + static_cast<int32_t>(i);
  }
  return -1;
}
inline int32_t UnusedId() { return kFirstMerge + static_cast<int32_t>(SmallMerges().size()); }

inline const std::vector<std::string>& SmallSpecials() {
  static const std::vector<std::string> specials = {
      "[BOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>",
      "<|im_middle|>", "<|a|>", "<|a|>b",
  };
  return specials;
}
inline int32_t SpecialId(const std::string& text) {
  const auto& s = SmallSpecials();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == text) return UnusedId() + 1 + static_cast<int32_t>(i);
  }
  return -1;
}

inline VocabSpec SmallVocab(std::string pre = "kimi-k2", bool with_specials = true) {
  VocabSpec v;
  v.pre = std::move(pre);
  auto add = [&](std::string token, TokenType type) {
    v.tokens.push_back(std::move(token));
    v.token_types.push_back(static_cast<int32_t>(type));
  };
  for (int b = 0; b < 256; ++b) add(BytesToGgufToken(std::string(1, static_cast<char>(b))), TokenType::kNormal);
  for (const auto& m : SmallMerges()) add(BytesToGgufToken(m), TokenType::kNormal);
  add("[PAD]", TokenType::kUnused);
  if (with_specials) {
    for (const auto& s : SmallSpecials()) {
      add(s, s == "<|a|>b" ? TokenType::kUserDefined : TokenType::kControl);
    }
    v.bos_id = SpecialId("[BOS]");
    v.eos_id = SpecialId("<|im_end|>");
    v.pad_id = UnusedId();
  }
  return v;
}

}  // namespace k3::tok::testing
