// The GPU engine behind runtime::RankEngine, so the worker group's step loop and the leader
// service run GPU ranks unchanged (k3-worker --backend cuda).
#pragma once

#include <cstddef>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/common/status_macros.h"
#include "worker/engine_cuda/cuda_engine.h"
#include "worker/runtime/rank_engine.h"

namespace k3::engine_cuda {

// BandTop's candidates become runtime::Candidate in the step message: the same 8-byte record.
static_assert(sizeof(cuda::BandTopCandidate) == sizeof(runtime::Candidate) && sizeof(runtime::Candidate) == 8);
static_assert(offsetof(cuda::BandTopCandidate, token) == offsetof(runtime::Candidate, token) &&
              offsetof(cuda::BandTopCandidate, logit) == offsetof(runtime::Candidate, logit));
static_assert(cuda::kBandTopMaxN == runtime::kMaxTopN);

class CudaRankEngine final : public runtime::RankEngine {
 public:
  explicit CudaRankEngine(CudaEngine& e) : e_(e) {}
  absl::Status Add(engine::SeqId id) override { return e_.Add(id); }
  absl::Status Free(engine::SeqId id) override { return e_.Free(id); }
  absl::Status Fork(engine::SeqId src, engine::SeqId dst) override {
    return absl::UnimplementedError(absl::StrCat("fork of sequence ", src, " into ", dst,
                                                 ": the GPU engine does not fork sequences yet"));
  }
  absl::StatusOr<engine::ForwardResult> Forward(std::span<const engine::SeqInput> batch) override {
    return e_.Forward(batch);
  }
  // The bands summarized on the GPU: only the candidates and logsumexp come back (and the band of
  // entries that want full_logits).
  absl::StatusOr<std::vector<std::vector<runtime::RowOutput>>> ForwardBands(
      std::span<const runtime::StepEntry> entries) override {
    std::vector<engine::SeqInput> inputs;
    std::vector<BandRequest> requests;
    for (const runtime::StepEntry& e : entries) {
      inputs.push_back({e.seq, e.tokens, e.all_positions});
      requests.push_back({e.top_n, e.full_logits});
    }
    K3_ASSIGN_OR_RETURN(std::vector<BandSummary> bands, e_.ForwardSummaries(inputs, requests));
    const int64_t band = vocab_band_width();
    std::vector<std::vector<runtime::RowOutput>> out(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      const int64_t k = entries[i].top_n;
      for (size_t row = 0; row < bands[i].logsumexp.size(); ++row) {
        runtime::RowOutput& r = out[i].emplace_back();
        const cuda::BandTopCandidate* top = bands[i].top.data() + row * k;
        for (int64_t j = 0; j < k; ++j) r.top.push_back({top[j].token, top[j].logit});
        r.logsumexp = bands[i].logsumexp[row];
        if (entries[i].full_logits) {
          r.logits.assign(bands[i].logits.begin() + row * band, bands[i].logits.begin() + (row + 1) * band);
        }
      }
    }
    return out;
  }
  int64_t vocab_band_width() const override { return e_.shard().vocab_width; }
  int64_t free_slots() const override { return e_.free_slot_count(); }
  int64_t free_cache_tokens() const override { return e_.free_cache_tokens(); }

 private:
  CudaEngine& e_;
};

}  // namespace k3::engine_cuda
