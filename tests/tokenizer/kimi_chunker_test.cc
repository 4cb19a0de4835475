#include "coordinator/tokenizer/kimi_chunker.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace k3::tok {
namespace {

std::vector<std::string> Chunks(std::string_view text, size_t max_chars, size_t max_run) {
  std::vector<std::string> out;
  ForEachKimiChunk(text, [&](std::string_view c) { out.emplace_back(c); }, max_chars, max_run);
  return out;
}

// Hand-run of tokenization_kimi.py's _split_whitespaces_or_nonwhitespaces("aaaa bbbbbb", 3).
TEST(KimiChunker, CutsRunsLongerThanTheLimit) {
  EXPECT_EQ(Chunks("aaaa bbbbbb", 400'000, 3), (std::vector<std::string>{"aaa", "a bbb", "bbb"}));
  EXPECT_EQ(Chunks("ab  cd", 400'000, 3), (std::vector<std::string>{"ab  cd"}));
  EXPECT_EQ(Chunks("     x", 400'000, 2), (std::vector<std::string>{"  ", "  ", " x"}));
}

TEST(KimiChunker, CountsCodePointsNotBytes) {
  EXPECT_EQ(Chunks("中中中中中", 400'000, 2),
            (std::vector<std::string>{"中中", "中中", "中"}));
  EXPECT_EQ(Chunks("abcdefghij", 4, 100), (std::vector<std::string>{"abcd", "efgh", "ij"}));
  EXPECT_EQ(Chunks("中文中文中", 2, 100), (std::vector<std::string>{"中文", "中文", "中"}));
}

TEST(KimiChunker, DefaultsAndEmpty) {
  EXPECT_EQ(Chunks("", 400'000, 25'000), std::vector<std::string>{""});
  const std::string run(30'000, 'a');
  std::vector<std::string> out;
  ForEachKimiChunk(run, [&](std::string_view c) { out.emplace_back(c); });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].size(), 25'000u);
  EXPECT_EQ(out[1].size(), 5'000u);
}

TEST(KimiChunker, PythonIsSpace) {
  for (char32_t cp : {U' ', U'\t', U'\n', U'\x0B', U'\x0C', U'\r', U'\x1C', U'\x1F', U'\x85',
                      U'\xA0', U'\u1680', U'\u2000', U'\u200A', U'\u2028', U'\u2029', U'\u202F',
                      U'\u205F', U'\u3000'}) {
    EXPECT_TRUE(IsPythonSpace(cp)) << static_cast<uint32_t>(cp);
  }
  for (char32_t cp : {U'a', U'\x1B', U'\u180E', U'\u200B', U'\uFEFF', U'\u4E2D'}) {
    EXPECT_FALSE(IsPythonSpace(cp)) << static_cast<uint32_t>(cp);
  }
}

}  // namespace
}  // namespace k3::tok
