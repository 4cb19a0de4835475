#include "coordinator/tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <random>
#include <string>

namespace k3::tok {
namespace {

// Owns the token bytes the RankMap views point into.
struct Ranks {
  std::deque<std::string> storage;
  RankMap map;
  void Add(std::string bytes) {
    storage.push_back(std::move(bytes));
    map.emplace(storage.back(), static_cast<int32_t>(map.size()));
  }
  Ranks() {
    for (int b = 0; b < 256; ++b) Add(std::string(1, static_cast<char>(b)));
  }
  std::vector<int32_t> Encode(std::string_view piece, bool heap) const {
    std::vector<int32_t> out;
    heap ? BytePairEncodeHeap(piece, map, &out) : BytePairEncodeQuadratic(piece, map, &out);
    return out;
  }
};

TEST(Bpe, MergesLowestRankFirst) {
  Ranks r;
  r.Add("ab");   // 256
  r.Add("bc");   // 257
  r.Add("abc");  // 258
  for (bool heap : {false, true}) {
    EXPECT_EQ(r.Encode("abc", heap), std::vector<int32_t>{258});
    EXPECT_EQ(r.Encode("abcb", heap), (std::vector<int32_t>{258, 'b'}));
    EXPECT_EQ(r.Encode("bca", heap), (std::vector<int32_t>{257, 'a'}));
  }
}

TEST(Bpe, LowerRankWinsOverPosition) {
  Ranks r;
  r.Add("bc");  // 256: merged first although "ab" comes first in the text
  r.Add("ab");  // 257
  for (bool heap : {false, true}) EXPECT_EQ(r.Encode("abc", heap), (std::vector<int32_t>{'a', 256}));
}

TEST(Bpe, TiesGoToTheLeftmostPair) {
  Ranks r;
  r.Add("aa");  // 256
  for (bool heap : {false, true}) {
    EXPECT_EQ(r.Encode("aaa", heap), (std::vector<int32_t>{256, 'a'}));
    EXPECT_EQ(r.Encode("aaaaa", heap), (std::vector<int32_t>{256, 256, 'a'}));
  }
}

TEST(Bpe, SingleByteAndEmpty) {
  Ranks r;
  for (bool heap : {false, true}) {
    EXPECT_EQ(r.Encode("z", heap), std::vector<int32_t>{'z'});
    EXPECT_TRUE(r.Encode("", heap).empty());
  }
}

// The heap merge must reproduce tiktoken's loop exactly, on random vocabularies over a small
// alphabet (many ties and overlapping candidates).
TEST(Bpe, HeapAgreesWithQuadraticOnRandomInputs) {
  std::mt19937 rng(7);
  const std::string alphabet = "abcd ";
  for (int trial = 0; trial < 200; ++trial) {
    Ranks r;
    std::uniform_int_distribution<int> len_dist(2, 6);
    std::uniform_int_distribution<size_t> ch(0, alphabet.size() - 1);
    for (int k = 0; k < 60; ++k) {
      std::string t;
      for (int n = len_dist(rng); n > 0; --n) t.push_back(alphabet[ch(rng)]);
      if (!r.map.contains(t)) r.Add(t);
    }
    for (int p = 0; p < 20; ++p) {
      std::string piece;
      for (int n = std::uniform_int_distribution<int>(1, 300)(rng); n > 0; --n) {
        piece.push_back(alphabet[ch(rng)]);
      }
      ASSERT_EQ(r.Encode(piece, false), r.Encode(piece, true)) << "trial " << trial << ": " << piece;
    }
  }
}

// A 200k-byte piece must not take quadratic time (tiktoken's loop would need ~10^10 steps).
TEST(Bpe, LongPieceIsFast) {
  Ranks r;
  r.Add(std::string(2, ' '));
  r.Add(std::string(4, ' '));
  r.Add(std::string(8, ' '));
  r.Add(std::string(16, ' '));
  const std::string piece(200'000, ' ');
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> out;
  BytePairEncode(piece, r.map, &out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(out, std::vector<int32_t>(200'000 / 16, 259));
  EXPECT_LT(s, 2.0);
  EXPECT_EQ(r.Encode(std::string(1000, ' '), false), r.Encode(std::string(1000, ' '), true));
}

}  // namespace
}  // namespace k3::tok
