#include "coordinator/tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace k3::tok {
namespace {

std::string Fffd(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += kReplacementChar;
  return s;
}

TEST(Utf8, DecodeStepKinds) {
  EXPECT_EQ(DecodeUtf8Step("a").kind, Utf8Step::Kind::kValid);
  const Utf8Step han = DecodeUtf8Step("\xE4\xB8\xAD");
  EXPECT_EQ(han.kind, Utf8Step::Kind::kValid);
  EXPECT_EQ(han.len, 3u);
  EXPECT_EQ(han.cp, U'\u4E2D');
  const Utf8Step emoji = DecodeUtf8Step("\xF0\x9F\x99\x82");
  EXPECT_EQ(emoji.cp, U'\U0001F642');
  EXPECT_EQ(DecodeUtf8Step("\xF0\x9F\x99").kind, Utf8Step::Kind::kIncomplete);
  EXPECT_EQ(DecodeUtf8Step("\xF0\x9F\x99").len, 3u);
  EXPECT_EQ(DecodeUtf8Step("\xE0\x80").kind, Utf8Step::Kind::kInvalid);  // overlong
  EXPECT_EQ(DecodeUtf8Step("\xE0\x80").len, 1u);
  EXPECT_EQ(DecodeUtf8Step("\xF0\x9F\x41").kind, Utf8Step::Kind::kInvalid);
  EXPECT_EQ(DecodeUtf8Step("\xF0\x9F\x41").len, 2u);  // maximal subpart F0 9F
}

TEST(Utf8, Validity) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii\n"));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x99\x82 \xF4\x8F\xBF\xBF"));
  EXPECT_EQ(FindInvalidUtf8("ab\xC0\x80"), 2u);            // overlong
  EXPECT_EQ(FindInvalidUtf8("\xED\xA0\x80"), 0u);          // surrogate
  EXPECT_EQ(FindInvalidUtf8("x\xF4\x90\x80\x80"), 1u);     // above U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("\xF5\x80\x80\x80"), 0u);
  EXPECT_EQ(FindInvalidUtf8("abc\x80"), 3u);               // stray continuation
  EXPECT_EQ(FindInvalidUtf8("abc\xE4\xB8"), 3u);           // truncated
}

TEST(Utf8, ToValidUtf8ReplacesMaximalSubparts) {
  EXPECT_EQ(ToValidUtf8("ok \xE4\xB8\xAD"), "ok \xE4\xB8\xAD");
  EXPECT_EQ(ToValidUtf8("a\xF0\x9F\x98" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(ToValidUtf8("\xE0\x80"), Fffd(2));
  EXPECT_EQ(ToValidUtf8("\xED\xA0\x80"), Fffd(3));
  EXPECT_EQ(ToValidUtf8("\xF0\x9F\x98"), Fffd(1));
  EXPECT_EQ(ToValidUtf8("\xFF\xFE"), Fffd(2));
}

TEST(Utf8, AppendUtf8) {
  std::string s;
  for (char32_t cp : {U'a', U'\u00E9', U'\u4E2D', U'\U0001F642'}) AppendUtf8(cp, &s);
  EXPECT_EQ(s, "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x99\x82");
}

}  // namespace
}  // namespace k3::tok
