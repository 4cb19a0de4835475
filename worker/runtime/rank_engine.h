// What the worker group's step loop and the leader service need from one rank's engine: the
// CPU engine (CpuRankEngine, here) or the GPU engine (engine_cuda::CudaRankEngine). One step
// protocol serves both.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/common/status_macros.h"
#include "worker/engine/engine.h"
#include "worker/runtime/band_merge.h"
#include "worker/runtime/step.h"

namespace k3::runtime {

class RankEngine {
 public:
  virtual ~RankEngine() = default;
  virtual absl::Status Add(engine::SeqId id) = 0;    // a new, empty sequence
  virtual absl::Status Free(engine::SeqId id) = 0;
  virtual absl::Status Fork(engine::SeqId src, engine::SeqId dst) = 0;
  // engine::Engine::Forward's contract: this rank's vocabulary band of the logits.
  virtual absl::StatusOr<engine::ForwardResult> Forward(std::span<const engine::SeqInput> batch) = 0;
  // The forward of a step's entries, summarized per output row (per entry, its rows in order)
  // over this rank's band: the entry's top_n best candidates exactly as SummarizeBand gives them
  // (padding included), the band's logsumexp, and the band's logits when it wants full_logits.
  // This default runs Forward and SummarizeBand on the host; an engine whose logits live on a
  // device overrides it to summarize there and download only that.
  virtual absl::StatusOr<std::vector<std::vector<RowOutput>>> ForwardBands(std::span<const StepEntry> entries);
  virtual int64_t vocab_band_width() const = 0;
  virtual int64_t free_slots() const = 0;        // sequences that can still be added
  virtual int64_t free_cache_tokens() const = 0; // MLA cache room, in tokens
};

class CpuRankEngine final : public RankEngine {
 public:
  explicit CpuRankEngine(engine::Engine& e) : e_(e) {}
  absl::Status Add(engine::SeqId id) override { return e_.cache().Add(id); }
  absl::Status Free(engine::SeqId id) override { return e_.cache().Free(id); }
  absl::Status Fork(engine::SeqId src, engine::SeqId dst) override { return e_.cache().Fork(src, dst); }
  absl::StatusOr<engine::ForwardResult> Forward(std::span<const engine::SeqInput> batch) override {
    return e_.Forward(batch);
  }
  int64_t vocab_band_width() const override { return e_.shard().vocab_width; }
  int64_t free_slots() const override { return e_.cache().free_slots(); }
  int64_t free_cache_tokens() const override {
    return e_.cache().free_pages() * e_.cache().shape().page_size;
  }

 private:
  engine::Engine& e_;
};

inline absl::StatusOr<std::vector<std::vector<RowOutput>>> RankEngine::ForwardBands(
    std::span<const StepEntry> entries) {
  std::vector<engine::SeqInput> inputs;
  for (const StepEntry& e : entries) inputs.push_back({e.seq, e.tokens, e.all_positions});
  K3_ASSIGN_OR_RETURN(engine::ForwardResult result, Forward(inputs));
  const int64_t band_width = vocab_band_width();
  std::vector<std::vector<RowOutput>> out(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const StepEntry& e = entries[i];
    for (int64_t row = 0; row < result.n_rows[i]; ++row) {
      const float* logits = result.row(i, row);
      RowOutput& r = out[i].emplace_back();
      r.top.resize(e.top_n);
      SummarizeBand(logits, band_width, result.band_begin, e.top_n, r.top.data(), &r.logsumexp);
      if (e.full_logits) r.logits.assign(logits, logits + band_width);
    }
  }
  return out;
}

}  // namespace k3::runtime
