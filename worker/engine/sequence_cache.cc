#include "worker/engine/sequence_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace k3::engine {

SequenceCache::SequenceCache(const CacheShape& shape) : shape_(shape) {
  pages_.assign(static_cast<size_t>(shape_.n_pages) * page_floats(), 0.0f);
  refcount_.assign(shape_.n_pages, 0);
  for (int64_t p = shape_.n_pages - 1; p >= 0; --p) free_pages_.push_back(static_cast<int32_t>(p));
  slots_.assign(static_cast<size_t>(shape_.max_seqs) * shape_.n_kda_layers *
                    shape_.slot_floats_per_layer(),
                0.0f);
  for (int64_t s = shape_.max_seqs - 1; s >= 0; --s) free_slots_.push_back(s);
}

absl::Status SequenceCache::Add(SeqId id) {
  if (seqs_.contains(id)) return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " exists"));
  if (free_slots_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no free sequence slot for sequence ", id, " (", shape_.max_seqs, " in use)"));
  }
  Sequence s;
  s.slot = free_slots_.back();
  free_slots_.pop_back();
  float* data = SlotData(s.slot);
  std::fill(data, data + shape_.n_kda_layers * shape_.slot_floats_per_layer(), 0.0f);
  seqs_.emplace(id, std::move(s));
  return absl::OkStatus();
}

absl::Status SequenceCache::Fork(SeqId src, SeqId dst) {
  auto it = seqs_.find(src);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", src, " to fork"));
  if (seqs_.contains(dst)) return absl::AlreadyExistsError(absl::StrCat("sequence ", dst, " exists"));
  if (free_slots_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat("no free sequence slot to fork ", src));
  }
  Sequence s;
  s.length = it->second.length;
  s.pages = it->second.pages;
  for (int32_t p : s.pages) ++refcount_[p];
  s.slot = free_slots_.back();
  free_slots_.pop_back();
  const int64_t n = shape_.n_kda_layers * shape_.slot_floats_per_layer();
  std::memcpy(SlotData(s.slot), SlotData(it->second.slot), n * sizeof(float));
  seqs_.emplace(dst, std::move(s));
  return absl::OkStatus();
}

void SequenceCache::Release(int32_t page) {
  if (--refcount_[page] == 0) free_pages_.push_back(page);
}

absl::Status SequenceCache::Free(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id, " to free"));
  for (int32_t p : it->second.pages) Release(p);
  free_slots_.push_back(it->second.slot);
  seqs_.erase(it);
  return absl::OkStatus();
}

absl::Status SequenceCache::Reserve(SeqId id, int64_t n) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  Sequence& s = it->second;
  if (shape_.n_mla_layers == 0 || n <= 0) return absl::OkStatus();
  const int64_t ps = shape_.page_size;
  const int64_t have = static_cast<int64_t>(s.pages.size());
  const int64_t need = (s.length + n + ps - 1) / ps;
  // A shared page that still has room is written next: it must become private.
  const bool unshare = s.length % ps != 0 && have > 0 && refcount_[s.pages[s.length / ps]] > 1;
  const int64_t new_pages = std::max<int64_t>(0, need - have) + (unshare ? 1 : 0);
  if (new_pages > free_pages()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "MLA cache full: sequence ", id, " needs ", new_pages, " more page(s) of ", ps,
        " tokens for ", n, " new token(s) at length ", s.length, "; ", free_pages(),
        " free of ", shape_.n_pages));
  }
  if (unshare) {
    const int64_t idx = s.length / ps;
    const int32_t old_page = s.pages[idx];
    const int32_t fresh = free_pages_.back();
    free_pages_.pop_back();
    refcount_[fresh] = 1;
    std::memcpy(PageData(fresh), PageData(old_page), page_floats() * sizeof(float));
    Release(old_page);
    s.pages[idx] = fresh;
  }
  while (static_cast<int64_t>(s.pages.size()) < need) {
    const int32_t fresh = free_pages_.back();
    free_pages_.pop_back();
    refcount_[fresh] = 1;
    s.pages.push_back(fresh);
  }
  return absl::OkStatus();
}

void SequenceCache::Commit(SeqId id, int64_t n) { seqs_.at(id).length += n; }

int64_t SequenceCache::Length(SeqId id) const { return seqs_.at(id).length; }

float* SequenceCache::MlaRow(SeqId id, int64_t mla_layer, int64_t pos) {
  const Sequence& s = seqs_.at(id);
  const int32_t page = s.pages[pos / shape_.page_size];
  return PageData(page) + (mla_layer * shape_.page_size + pos % shape_.page_size) * shape_.mla_row;
}

std::vector<const float*> SequenceCache::MlaPages(SeqId id, int64_t mla_layer) const {
  const Sequence& s = seqs_.at(id);
  std::vector<const float*> out;
  out.reserve(s.pages.size());
  for (int32_t p : s.pages) {
    out.push_back(pages_.data() + static_cast<size_t>(p) * page_floats() +
                  mla_layer * shape_.page_size * shape_.mla_row);
  }
  return out;
}

float* SequenceCache::KdaState(SeqId id, int64_t kda_layer) {
  return SlotData(seqs_.at(id).slot) + kda_layer * shape_.slot_floats_per_layer();
}

float* SequenceCache::ConvHistory(SeqId id, int64_t kda_layer) {
  return KdaState(id, kda_layer) + shape_.state_floats();
}

}  // namespace k3::engine
