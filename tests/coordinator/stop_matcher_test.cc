#include "coordinator/server/stop_matcher.h"

#include <gtest/gtest.h>

namespace k3::coord {
namespace {

// Feeds pieces and returns (everything emitted, stopped).
std::pair<std::string, bool> Feed(std::vector<std::string> stops, std::vector<std::string> pieces) {
  StopMatcher m(std::move(stops));
  std::string out;
  for (const std::string& p : pieces) {
    auto r = m.Feed(p);
    out += r.text;
    if (r.stopped) return {out, true};
  }
  return {out + m.Flush(), false};
}

TEST(StopMatcher, NoStopsPassesEverythingAtOnce) {
  StopMatcher m({});
  EXPECT_EQ(m.Feed("abc").text, "abc");
}

TEST(StopMatcher, StopInsideOnePiece) {
  EXPECT_EQ(Feed({"END"}, {"hello END world"}), std::make_pair(std::string("hello "), true));
}

TEST(StopMatcher, StopAcrossPieces) {
  EXPECT_EQ(Feed({"<|stop|>"}, {"ab<", "|st", "op|>cd"}), std::make_pair(std::string("ab"), true));
}

TEST(StopMatcher, HoldsBackOnlyAPossiblePrefix) {
  StopMatcher m({"###"});
  auto r = m.Feed("x#");
  EXPECT_EQ(r.text, "x");  // "#" might start "###"
  r = m.Feed("y");
  EXPECT_EQ(r.text, "#y");  // it did not
  EXPECT_FALSE(r.stopped);
}

TEST(StopMatcher, EarliestOfSeveralStops) {
  EXPECT_EQ(Feed({"bb", "a"}, {"xxbba"}), std::make_pair(std::string("xx"), true));
}

TEST(StopMatcher, FlushReturnsHeldText) {
  EXPECT_EQ(Feed({"stop"}, {"go st"}), std::make_pair(std::string("go st"), false));
}

}  // namespace
}  // namespace k3::coord
