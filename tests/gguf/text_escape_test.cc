// Quoting of untrusted strings from a GGUF (keys, tensor names, tokens): what each form escapes.
#include "worker/gguf/text_escape.h"

#include <string>

#include <gtest/gtest.h>

namespace k3::gguf {
namespace {

TEST(TextEscape, DisplayEscapesQuotesBackslashesAndControlBytes) {
  EXPECT_EQ(QuoteForDisplay("blk.0.attn_q"), "\"blk.0.attn_q\"");
  EXPECT_EQ(QuoteForDisplay("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(QuoteForDisplay("\n\t\r"), "\"\\n\\t\\r\"");
  EXPECT_EQ(QuoteForDisplay(std::string("\x00\x1b\x7f", 3)), "\"\\x00\\x1b\\x7f\"");
  EXPECT_EQ(QuoteForDisplay("\xc3\xa9\xe2\x82\xac"), "\"\xc3\xa9\xe2\x82\xac\"");  // UTF-8 as it is
}

TEST(TextEscape, JsonEscapesAndReplacesWhatIsNotUtf8) {
  EXPECT_EQ(JsonQuote("a\"b\\c\n\t\r"), "\"a\\\"b\\\\c\\n\\t\\r\"");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonQuote("\x7f"), "\"\x7f\"");                        // DEL is allowed in JSON
  EXPECT_EQ(JsonQuote("\xc3\xa9\xf0\x9f\x98\x80"), "\"\xc3\xa9\xf0\x9f\x98\x80\"");
  EXPECT_EQ(JsonQuote("\xff"), "\"\\ufffd\"");                      // not a UTF-8 lead byte
  EXPECT_EQ(JsonQuote("\xc0\xaf"), "\"\\ufffd\\ufffd\"");           // overlong '/'
  EXPECT_EQ(JsonQuote("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // a surrogate
  EXPECT_EQ(JsonQuote("a\xe2\x82"), "\"a\\ufffd\\ufffd\"");         // cut short
}

}  // namespace
}  // namespace k3::gguf
