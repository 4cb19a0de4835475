#include "coordinator/tokenizer/detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "coordinator/tokenizer/utf8.h"
#include "tests/tokenizer/test_vocab.h"

namespace k3::tok {
namespace {

using Ids = std::vector<int32_t>;

Tokenizer Make() { return Tokenizer::FromVocab(testing::SmallVocab()).value(); }

// Feeds all ids; checks every piece is valid UTF-8 and returns the concatenation.
std::string Stream(const Tokenizer& t, const Ids& ids, bool include_special = true) {
  IncrementalDetokenizer d(t, include_special);
  std::string all;
  for (int32_t id : ids) {
    auto piece = d.Feed(id);
    EXPECT_TRUE(piece.ok()) << piece.status();
    EXPECT_TRUE(IsValidUtf8(*piece)) << "after id " << id;
    EXPECT_LE(d.pending_bytes(), 3u);
    all += *piece;
  }
  const std::string tail = d.Finish();
  EXPECT_TRUE(IsValidUtf8(tail));
  EXPECT_EQ(d.pending_bytes(), 0u);
  return all + tail;
}

TEST(Detokenizer, HoldsBackSplitCharacters) {
  const Tokenizer t = Make();
  IncrementalDetokenizer d(t);
  EXPECT_EQ(d.Feed('h').value(), "h");
  EXPECT_EQ(d.Feed(0xE4).value(), "");  // 中 = E4 B8 AD, one byte per token
  EXPECT_EQ(d.Feed(0xB8).value(), "");
  EXPECT_EQ(d.Feed(0xAD).value(), "中");
  EXPECT_EQ(d.Feed(testing::MergeId("\xE6\x96")).value(), "");  // 文 = E6 96 87
  EXPECT_EQ(d.Feed(0x87).value(), "文");
  EXPECT_EQ(d.Finish(), "");
}

TEST(Detokenizer, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer t = Make();
  IncrementalDetokenizer d(t);
  EXPECT_EQ(d.Feed(0xFF).value(), kReplacementChar);       // can never start a character
  EXPECT_EQ(d.Feed(0xE4).value(), "");
  EXPECT_EQ(d.Feed('x').value(), std::string(kReplacementChar) + "x");  // E4 then 'x'
  EXPECT_EQ(d.Feed(0xF0).value(), "");
  EXPECT_EQ(d.Feed(0x9F).value(), "");
  EXPECT_EQ(d.Finish(), kReplacementChar);  // truncated at the end: one U+FFFD
  EXPECT_FALSE(d.Feed(-5).ok());
}

TEST(Detokenizer, SkipsSpecialsWhenAsked) {
  const Tokenizer t = Make();
  const Ids ids = t.Encode("[BOS]hello<|im_end|>", true).value();
  EXPECT_EQ(Stream(t, ids, true), "[BOS]hello<|im_end|>");
  EXPECT_EQ(Stream(t, ids, false), "hello");
}

TEST(Detokenizer, ConcatenationEqualsDecode) {
  const Tokenizer t = Make();
  const Ids ids = t.Encode("hello 中文 world 🙂 abcd ü").value();
  EXPECT_EQ(Stream(t, ids), t.Decode(ids).value());

  // Random id sequences (bytes of every kind, merges, specials, the unused id).
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> any(0, t.vocab_size() - 1);
  for (int trial = 0; trial < 500; ++trial) {
    Ids random(std::uniform_int_distribution<int>(0, 40)(rng));
    for (auto& id : random) id = any(rng);
    EXPECT_EQ(Stream(t, random), ToValidUtf8(t.Decode(random).value())) << "trial " << trial;
  }
}

}  // namespace
}  // namespace k3::tok
