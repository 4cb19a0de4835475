// Will a model, split by a rank plan, fit on the GPUs at a context length and sequence count?
// Works from shapes and types alone, so it can plan the real 2.8T model without its weights.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/k3_config.h"
#include "worker/model/shard_rules.h"
#include "worker/model/tensor_manifest.h"

namespace k3::model {

inline constexpr uint64_t kGiB = 1ull << 30;
inline constexpr uint64_t kH200Bytes = 143771ull << 20;  // 143,771 MiB as the device reports

struct FitRequest {
  RankPlan plan;
  int64_t context = 131072;        // tokens of MLA cache per sequence
  int64_t n_seqs = 1;              // sequences resident at once
  int64_t prefill_chunk = 4096;    // tokens per prefill step (sizes the working buffers)
  int cache_elem_bytes = 2;        // f16/bf16 MLA cache
  uint64_t device_bytes = kH200Bytes;
  uint64_t runtime_reserve = 3 * kGiB;  // CUDA context, NCCL buffers, library workspaces
  // The routed experts' IQ1_S rows held in the ternary form (the CUDA engine's ternary_experts,
  // k3-worker --ternary-experts): Iq1sTernaryRowBytes per row instead of 50 per 256 weights.
  bool ternary_experts = false;
};

struct RankFit {
  int rank = 0;
  uint64_t weights = 0;      // this rank's shard, replicated tensors included
  uint64_t replicated = 0;   // of which replicated on every rank
  uint64_t mla_cache = 0;    // 576-wide rows, all MLA layers, all sequences (replicated over TP)
  uint64_t kda_state = 0;    // this rank's heads' 128x128 states + conv history, all sequences
  uint64_t work = 0;         // activations and scratch for one prefill chunk
  uint64_t reserve = 0;
  uint64_t total() const { return weights + mla_cache + kda_state + work + reserve; }
};

struct FitReport {
  FitRequest request;
  std::vector<RankFit> ranks;
  uint64_t model_bytes = 0;  // the whole model, unsharded
  bool fits() const;
  std::string Table() const;  // one row per rank, GiB
};

using TypeOf = std::function<quant::GgmlType(const TensorSpec&)>;

absl::StatusOr<FitReport> PlanFit(const K3Config& config, const TypeOf& type_of,
                                  const FitRequest& request);

// OK when every rank fits; else an error naming the first rank that does not and its shortfall.
absl::Status RequireFit(const FitReport& report);

}  // namespace k3::model
