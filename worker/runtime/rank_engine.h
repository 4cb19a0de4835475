// What the worker group's step loop and the leader service need from one rank's engine: the
// CPU engine (CpuRankEngine, here) or the GPU engine (engine_cuda::CudaRankEngine). One step
// protocol serves both.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"

namespace k3::runtime {

class RankEngine {
 public:
  virtual ~RankEngine() = default;
  virtual absl::Status Add(engine::SeqId id) = 0;    // a new, empty sequence
  virtual absl::Status Free(engine::SeqId id) = 0;
  virtual absl::Status Fork(engine::SeqId src, engine::SeqId dst) = 0;
  // engine::Engine::Forward's contract: this rank's vocabulary band of the logits.
  virtual absl::StatusOr<engine::ForwardResult> Forward(std::span<const engine::SeqInput> batch) = 0;
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

}  // namespace k3::runtime
