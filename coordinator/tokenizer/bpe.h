// Byte-pair encoding of one pre-tokenized piece over token ranks, exactly as tiktoken does it:
// repeatedly merge the adjacent pair whose concatenated bytes have the lowest rank (the leftmost
// pair on a tie) until no adjacent pair is a token. A token's rank is its id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace k3::tok {

// Token bytes -> rank. The views point into storage owned by whoever owns the map.
using RankMap = absl::flat_hash_map<std::string_view, int32_t>;

// Pieces at least this long use the O(n log n) heap merge; shorter ones the simple loop.
inline constexpr size_t kHeapMergeMinBytes = 128;

// Appends the ids of `piece` to `out`. Precondition: every single byte is in `ranks`.
// (Callers first try the whole piece as one token, as tiktoken does; this function does not.)
void BytePairEncode(std::string_view piece, const RankMap& ranks, std::vector<int32_t>* out);

// The two algorithms behind BytePairEncode, exposed so a test can check that they agree.
void BytePairEncodeQuadratic(std::string_view piece, const RankMap& ranks,
                             std::vector<int32_t>* out);
void BytePairEncodeHeap(std::string_view piece, const RankMap& ranks, std::vector<int32_t>* out);

}  // namespace k3::tok
