// Per-sequence state of the engine: MLA latent rows in fixed-size pages (block tables, so
// sequences of any length share one pool, with copy-on-write forks) and KDA recurrent state
// plus short-conv history in per-sequence slots.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace k3::engine {

using SeqId = int64_t;

struct CacheShape {
  int64_t n_mla_layers = 0;
  int64_t mla_row = 0;          // floats per cached row (576)
  int64_t page_size = 64;       // rows per page
  int64_t n_pages = 0;          // pages in the pool
  int64_t n_kda_layers = 0;
  int64_t kda_heads = 0;        // heads held by this rank
  int64_t kda_head_dim = 0;
  int64_t conv_taps = 0;        // kernel size - 1 (history rows)
  int64_t max_seqs = 0;         // KDA state slots
  int64_t state_floats() const { return kda_heads * kda_head_dim * kda_head_dim; }
  int64_t conv_floats() const { return 3 * conv_taps * kda_heads * kda_head_dim; }
  int64_t slot_floats_per_layer() const { return state_floats() + conv_floats(); }
};

class SequenceCache {
 public:
  explicit SequenceCache(const CacheShape& shape);

  const CacheShape& shape() const { return shape_; }

  // A new, empty sequence (zero KDA state). AlreadyExists / ResourceExhausted (no free slot).
  absl::Status Add(SeqId id);
  // dst becomes a copy of src: pages are shared until written (copy-on-write), state is copied.
  absl::Status Fork(SeqId src, SeqId dst);
  // Frees the sequence's slot and its references to pages.
  absl::Status Free(SeqId id);
  bool Contains(SeqId id) const { return seqs_.contains(id); }

  // Makes room for positions [length, length + n): allocates pages and un-shares a partly
  // filled shared page. ResourceExhausted when the pool runs out (nothing is changed then).
  absl::Status Reserve(SeqId id, int64_t n);
  // Marks n more positions as written (after the forward pass filled them).
  void Commit(SeqId id, int64_t n);

  int64_t Length(SeqId id) const;
  // Row of `mla_layer` at position pos (must be reserved).
  float* MlaRow(SeqId id, int64_t mla_layer, int64_t pos);
  // Page pointers of one MLA layer for the sequence (for the attention kernel), and the stride.
  std::vector<const float*> MlaPages(SeqId id, int64_t mla_layer) const;
  int64_t page_row_stride() const { return shape_.mla_row; }

  float* KdaState(SeqId id, int64_t kda_layer);    // [heads][dk][dv]
  float* ConvHistory(SeqId id, int64_t kda_layer); // [3 (q,k,v)][taps][heads*dk]

  int64_t free_pages() const { return static_cast<int64_t>(free_pages_.size()); }
  int64_t free_slots() const { return static_cast<int64_t>(free_slots_.size()); }
  int64_t n_sequences() const { return static_cast<int64_t>(seqs_.size()); }

 private:
  struct Sequence {
    int64_t length = 0;
    int64_t slot = -1;
    std::vector<int32_t> pages;  // block table
  };
  float* PageData(int32_t page) { return pages_.data() + static_cast<size_t>(page) * page_floats(); }
  int64_t page_floats() const { return shape_.n_mla_layers * shape_.page_size * shape_.mla_row; }
  float* SlotData(int64_t slot) {
    return slots_.data() + static_cast<size_t>(slot) * shape_.n_kda_layers * shape_.slot_floats_per_layer();
  }
  void Release(int32_t page);

  CacheShape shape_;
  std::vector<float> pages_;        // [n_pages][n_mla_layers][page_size][mla_row]
  std::vector<int32_t> refcount_;   // per page
  std::vector<int32_t> free_pages_;
  std::vector<float> slots_;        // [max_seqs][n_kda_layers][state | conv]
  std::vector<int64_t> free_slots_;
  std::unordered_map<SeqId, Sequence> seqs_;
};

}  // namespace k3::engine
