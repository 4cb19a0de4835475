// The pre-tokenizer splits. kimi-k2 has no reference implementation here, so its cases are
// reasoned by hand from the pattern in shared/spec/tokenizer.md (alternatives in order:
// 1 [Han]+, 2 lower-ending word, 3 upper word, 4 \p{N}{1,3}, 5 punctuation, 6 newlines,
// 7 \s+(?!\S), 8 \s+); the reasoning is in the comments.
#include "coordinator/tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace k3::tok {
namespace {

using Pieces = std::vector<std::string>;

Pieces Split(std::string_view pre_name, std::string_view text) {
  auto pre = PreTokenizer::Create(pre_name);
  EXPECT_TRUE(pre.ok()) << pre.status();
  if (!pre.ok()) return {};
  auto pieces = pre->Split(text);
  EXPECT_TRUE(pieces.ok()) << pieces.status();
  return pieces.ok() ? *pieces : Pieces{};
}

TEST(PreTokenizer, UnknownNameIsAnErrorNamingIt) {
  auto pre = PreTokenizer::Create("qwen9");
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pre.status().message().find("\"qwen9\""), std::string::npos) << pre.status();
}

TEST(PreTokenizer, KnownNames) {
  for (const char* name : {"kimi-k2", "llama-bpe", "cl100k", "o200k", "gpt-4o"}) {
    EXPECT_TRUE(PreTokenizer::Create(name).ok()) << name;
  }
}

TEST(PreTokenizer, RejectsInvalidUtf8) {
  auto pre = PreTokenizer::Create("kimi-k2");
  ASSERT_TRUE(pre.ok());
  EXPECT_FALSE(pre->Split("abc\xFF").ok());
}

// Han runs are cut out of letter runs: the letter classes exclude Han.
TEST(KimiK2Split, HanRunsSplitFromLatin) {
  // "Hello": alt 2 (X* = "H", Y+ = "ello", stopping at Han). "世界": alt 1. "World": alt 2.
  EXPECT_EQ(Split("kimi-k2", "Hello世界World"), (Pieces{"Hello", "世界", "World"}));
  // o200k has no Han rule: Han is Lo, inside its lower-ending class.
  EXPECT_EQ(Split("o200k", "Hello世界World"), (Pieces{"Hello世界", "World"}));
  // 々 (U+3005) is Lm but script Han: it stays in the Han run.
  EXPECT_EQ(Split("kimi-k2", "abc人々"), (Pieces{"abc", "人々"}));
  // Kana are Lo but not Han: a word of their own. 日本語 | のテキスト (X* backs off one char).
  EXPECT_EQ(Split("kimi-k2", "日本語のテキスト"), (Pieces{"日本語", "のテキスト"}));
  // A space before Han cannot join it (the optional prefix of alts 2/3 needs a non-Han
  // letter after it; alt 7 fails because Han follows), so alt 8 takes the lone space.
  EXPECT_EQ(Split("kimi-k2", " 中文abc"), (Pieces{" ", "中文", "abc"}));
  EXPECT_EQ(Split("kimi-k2", "中文 abc"), (Pieces{"中文", " abc"}));
  // Han is the Script property, not Script_Extensions: 。 (U+3002, script Common) is
  // punctuation (alt 5), not part of the Han run.
  EXPECT_EQ(Split("kimi-k2", "中文。"), (Pieces{"中文", "。"}));
  EXPECT_EQ(Split("kimi-k2", "第1章"), (Pieces{"第", "1", "章"}));
}

TEST(KimiK2Split, Contractions) {
  // "I'm": alt 2 fails ("I" is not lower-class); alt 3: X+ = "I", (?i:'m).
  // " WE'LL": alt 3 with the space as prefix and the case-insensitive 'LL.
  EXPECT_EQ(Split("kimi-k2", "I'm don't WE'LL they're"),
            (Pieces{"I'm", " don't", " WE'LL", " they're"}));
  // Only the listed suffixes attach: "'x" is punctuation + letters.
  EXPECT_EQ(Split("kimi-k2", "it'x"), (Pieces{"it", "'x"}));
  EXPECT_EQ(Split("kimi-k2", "'s"), (Pieces{"'s"}));
}

TEST(KimiK2Split, DigitsInGroupsOfAtMostThree) {
  EXPECT_EQ(Split("kimi-k2", "12345678 x"), (Pieces{"123", "456", "78", " x"}));
  EXPECT_EQ(Split("kimi-k2", "1234567890"), (Pieces{"123", "456", "789", "0"}));
  // Digits never take a leading space: " " then "42" ... alt 7 gives the space alone.
  EXPECT_EQ(Split("kimi-k2", "a 42"), (Pieces{"a", " ", "42"}));
}

TEST(KimiK2Split, CaseAndWhitespace) {
  EXPECT_EQ(Split("kimi-k2", "camelCaseWord"), (Pieces{"camel", "Case", "Word"}));
  // X* takes "HTTPS", Y+ "erver": one piece.
  EXPECT_EQ(Split("kimi-k2", "HTTPServer"), (Pieces{"HTTPServer"}));
  // "  \n" by alt 6 (\s* backs off to the newline), then alt 7 leaves one space for " b".
  EXPECT_EQ(Split("kimi-k2", "a  \n  b"), (Pieces{"a", "  \n", " ", " b"}));
  EXPECT_EQ(Split("kimi-k2", "hello!!!\n\nworld"), (Pieces{"hello", "!!!\n\n", "world"}));
  EXPECT_EQ(Split("kimi-k2", "x   "), (Pieces{"x", "   "}));
}

// Runs longer than 25,000 characters are cut first (tokenization_kimi.py), which also bounds
// the backtracking of the lookahead classes.
TEST(KimiK2Split, LongRunsAreChunked) {
  const Pieces letters = Split("kimi-k2", std::string(30'000, 'a'));
  ASSERT_EQ(letters.size(), 2u);
  EXPECT_EQ(letters[0], std::string(25'000, 'a'));
  EXPECT_EQ(letters[1], std::string(5'000, 'a'));
  const Pieces spaces = Split("kimi-k2", std::string(30'000, ' ') + "x");
  ASSERT_EQ(spaces.size(), 3u);
  EXPECT_EQ(spaces[0], std::string(25'000, ' '));
  EXPECT_EQ(spaces[1], std::string(4'999, ' '));
  EXPECT_EQ(spaces[2], " x");
  // 25,000 kana (Lo, so alt 2's X* takes them all and backs off one): one deep-backtracking
  // piece, which needs the enlarged JIT stack.
  std::string kana;
  for (int i = 0; i < 25'000; ++i) kana += "あ";
  const Pieces k = Split("kimi-k2", kana);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0], kana);
}

// White_Space as Rust defines it: U+180E is not a space (PCRE2's own \s says it is).
TEST(Cl100kSplit, WhiteSpaceMeansUnicodeWhiteSpace) {
  EXPECT_EQ(Split("cl100k", "!\u180E"), (Pieces{"!\u180E"}));
  EXPECT_EQ(Split("cl100k", "a\u0085\u0085b"), (Pieces{"a", "\u0085", "\u0085b"}));
}

TEST(Cl100kSplit, Basics) {
  EXPECT_EQ(Split("cl100k", "Hello world's 12345!\n\n"),
            (Pieces{"Hello", " world", "'s", " ", "123", "45", "!\n\n"}));
  EXPECT_EQ(Split("llama-bpe", "HTTPServer"), (Pieces{"HTTPServer"}));
}

TEST(O200kSplit, SlashesJoinPunctuation) {
  EXPECT_EQ(Split("o200k", "a//b"), (Pieces{"a", "//", "b"}));
  EXPECT_EQ(Split("o200k", "camelCase"), (Pieces{"camel", "Case"}));
  EXPECT_EQ(Split("cl100k", "camelCase"), (Pieces{"camelCase"}));
}

}  // namespace
}  // namespace k3::tok
