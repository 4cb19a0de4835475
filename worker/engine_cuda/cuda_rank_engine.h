// The GPU engine behind runtime::RankEngine, so the worker group's step loop and the leader
// service run GPU ranks unchanged (k3-worker --backend cuda).
#pragma once

#include "absl/strings/str_cat.h"
#include "worker/engine_cuda/cuda_engine.h"
#include "worker/runtime/rank_engine.h"

namespace k3::engine_cuda {

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
  int64_t vocab_band_width() const override { return e_.shard().vocab_width; }
  int64_t free_slots() const override { return e_.free_slot_count(); }
  int64_t free_cache_tokens() const override { return e_.free_cache_tokens(); }

 private:
  CudaEngine& e_;
};

}  // namespace k3::engine_cuda
