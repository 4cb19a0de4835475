#include "coordinator/tokenizer/pattern_translate.h"

#include <gtest/gtest.h>

namespace k3::tok {
namespace {

constexpr std::string_view kWs =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string Tr(std::string_view p) {
  auto r = TiktokenPatternToPcre2(p);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : "";
}

TEST(PatternTranslate, WhiteSpace) {
  EXPECT_EQ(Tr(R"(\s+)"), "[" + std::string(kWs) + "]+");
  EXPECT_EQ(Tr(R"(\s+(?!\S))"), "[" + std::string(kWs) + "]+(?![^" + std::string(kWs) + "])");
  EXPECT_EQ(Tr(R"([^\s\p{L}])"), "[^" + std::string(kWs) + R"(\p{L}])");
}

TEST(PatternTranslate, HanIsTheScriptProperty) {
  EXPECT_EQ(Tr(R"([\p{Han}]+)"), R"([\p{sc:Han}]+)");
  EXPECT_EQ(Tr(R"(\p{Han}\P{Han})"), R"(\p{sc:Han}\P{sc:Han})");
}

TEST(PatternTranslate, Intersection) {
  EXPECT_EQ(Tr(R"([\p{Lu}\p{M}&&[^\p{Han}]]*)"), R"((?:(?![\p{sc:Han}])[\p{Lu}\p{M}])*)");
  EXPECT_EQ(Tr(R"([\p{L}&&[a-z]])"), R"((?:(?=[a-z])[\p{L}]))");
}

TEST(PatternTranslate, PassesTheRestThrough) {
  constexpr std::string_view p = R"((?i:'s|'t)|\p{N}{1,3}| ?[^\r\n\p{L}\p{N}]?\p{L}+[\r\n/]*)";
  EXPECT_EQ(Tr(p), p);
}

TEST(PatternTranslate, RejectsWhatItCannotTranslate) {
  EXPECT_FALSE(TiktokenPatternToPcre2(R"([\S])").ok());
  EXPECT_FALSE(TiktokenPatternToPcre2(R"([a[b]])").ok());
  EXPECT_FALSE(TiktokenPatternToPcre2(R"([^a&&[b]])").ok());
  EXPECT_FALSE(TiktokenPatternToPcre2(R"([a&&[b]c])").ok());
  EXPECT_FALSE(TiktokenPatternToPcre2(R"([abc)").ok());
  EXPECT_FALSE(TiktokenPatternToPcre2("\\").ok());
}

}  // namespace
}  // namespace k3::tok
