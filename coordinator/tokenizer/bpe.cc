#include "coordinator/tokenizer/bpe.h"

#include <functional>
#include <limits>
#include <queue>
#include <utility>

namespace k3::tok {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();

int32_t RankOf(const RankMap& ranks, std::string_view bytes) {
  const auto it = ranks.find(bytes);
  return it == ranks.end() ? kNoRank : it->second;
}

}  // namespace

void BytePairEncode(std::string_view piece, const RankMap& ranks, std::vector<int32_t>* out) {
  if (piece.size() >= kHeapMergeMinBytes) {
    BytePairEncodeHeap(piece, ranks, out);
  } else {
    BytePairEncodeQuadratic(piece, ranks, out);
  }
}

// tiktoken's loop: parts[k] = (start of part k, rank of the pair parts[k] + parts[k+1]), with
// two sentinels at the end. Each merge rescans all parts, hence O(n^2) for an n-byte piece.
void BytePairEncodeQuadratic(std::string_view piece, const RankMap& ranks,
                             std::vector<int32_t>* out) {
  const size_t n = piece.size();
  if (n == 0) return;
  if (n == 1) {
    out->push_back(RankOf(ranks, piece));
    return;
  }
  std::vector<std::pair<size_t, int32_t>> parts;
  parts.reserve(n + 1);
  for (size_t i = 0; i + 1 < n; ++i) parts.emplace_back(i, RankOf(ranks, piece.substr(i, 2)));
  parts.emplace_back(n - 1, kNoRank);
  parts.emplace_back(n, kNoRank);

  // Rank of the bytes from part k to the end of part k+2 (what pair k becomes after a merge).
  auto merged_rank = [&](size_t k) {
    if (k + 3 >= parts.size()) return kNoRank;
    return RankOf(ranks, piece.substr(parts[k].first, parts[k + 3].first - parts[k].first));
  };

  while (true) {
    int32_t best = kNoRank;
    size_t at = 0;
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      if (parts[k].second < best) {
        best = parts[k].second;
        at = k;
      }
    }
    if (best == kNoRank) break;
    if (at > 0) parts[at - 1].second = merged_rank(at - 1);
    parts[at].second = merged_rank(at);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  for (size_t k = 0; k + 1 < parts.size(); ++k) {
    out->push_back(
        RankOf(ranks, piece.substr(parts[k].first, parts[k + 1].first - parts[k].first)));
  }
}

// The same merge order with a min-heap of (rank, start) and a linked list of parts. Heap entries
// go stale when a part dies or its pair changes; a pair only ever grows, so its rank cannot
// return to an old value, and comparing with the part's current pair rank detects staleness.
void BytePairEncodeHeap(std::string_view piece, const RankMap& ranks, std::vector<int32_t>* out) {
  const size_t n = piece.size();
  if (n < 2) {
    BytePairEncodeQuadratic(piece, ranks, out);
    return;
  }
  // Parts are named by their start offset; next[i] is where part i ends (n for the last).
  std::vector<size_t> next(n);
  std::vector<size_t> prev(n);
  std::vector<int32_t> pair_rank(n, kNoRank);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i - 1;  // wraps for i == 0; never read there
  }
  auto rank_at = [&](size_t i) {
    const size_t j = next[i];
    if (j >= n) return kNoRank;
    return RankOf(ranks, piece.substr(i, next[j] - i));
  };

  using Entry = std::pair<int32_t, size_t>;  // (rank, start): lowest rank, then leftmost
  std::vector<Entry> initial;
  initial.reserve(n);
  for (size_t i = 0; i + 1 < n; ++i) {
    pair_rank[i] = rank_at(i);
    if (pair_rank[i] != kNoRank) initial.emplace_back(pair_rank[i], i);
  }
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap(std::greater<>{},
                                                                      std::move(initial));
  while (!heap.empty()) {
    const auto [rank, i] = heap.top();
    heap.pop();
    if (!alive[i] || pair_rank[i] != rank) continue;  // stale
    const size_t j = next[i];
    alive[j] = false;
    next[i] = next[j];
    if (next[j] < n) prev[next[j]] = i;
    pair_rank[i] = rank_at(i);
    if (pair_rank[i] != kNoRank) heap.emplace(pair_rank[i], i);
    if (i > 0) {
      const size_t p = prev[i];
      pair_rank[p] = rank_at(p);
      if (pair_rank[p] != kNoRank) heap.emplace(pair_rank[p], p);
    }
  }
  for (size_t i = 0; i < n; i = next[i]) {
    out->push_back(RankOf(ranks, piece.substr(i, next[i] - i)));
  }
}

}  // namespace k3::tok
