#include "coordinator/tokenizer/byte_unicode.h"

#include <gtest/gtest.h>

namespace k3::tok {
namespace {

TEST(ByteUnicode, KnownMappings) {
  EXPECT_EQ(BytesToGgufToken("a"), "a");
  EXPECT_EQ(BytesToGgufToken(" "), "\xC4\xA0");    // U+0120 'Ġ'
  EXPECT_EQ(BytesToGgufToken("\n"), "\xC4\x8A");   // U+010A 'Ċ'
  EXPECT_EQ(BytesToGgufToken("\xAD"), "\xC5\x83");  // U+0143: the 68th shifted byte
  EXPECT_EQ(BytesToGgufToken(" hello"), "\xC4\xA0hello");
}

TEST(ByteUnicode, AllBytesRoundTrip) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string token = BytesToGgufToken(all);
  auto back = GgufTokenToBytes(token);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, all);
}

TEST(ByteUnicode, RejectsCharactersOutsideTheMap) {
  auto r = GgufTokenToBytes("a\xE2\x82\xAC");  // U+20AC
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("U+20AC"), std::string::npos) << r.status();
  EXPECT_FALSE(GgufTokenToBytes(" ").ok());  // a raw space is not in the alphabet
  EXPECT_FALSE(GgufTokenToBytes("\xC3").ok());
}

}  // namespace
}  // namespace k3::tok
