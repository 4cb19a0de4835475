// How each kimi-k3 tensor is divided among the ranks of one worker group.
//
// Attention (KDA and MLA) is tensor parallel over heads: projections into head space are split
// by output rows, the output projections by input columns (one all-reduce per attention).
// Routed experts are expert parallel over `expert_groups` groups, each group's experts further
// split into ranks/expert_groups bands of the expert FFN. Shared experts and the dense FFN are
// split by FFN band; the LM head and the embedding by vocabulary band. What stays replicated is
// small per layer and listed by ReplicatedBytes so its cost is visible.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/quant/ggml_type.h"
#include "worker/model/k3_config.h"
#include "worker/model/tensor_manifest.h"

namespace k3::model {

struct RankPlan {
  int ranks = 1;          // processes in the group (one GPU each)
  int expert_groups = 1;  // routed experts are divided into this many groups (divides ranks)
  int expert_bands() const { return ranks / expert_groups; }  // FFN bands inside a group
};

enum class ShardAxis {
  kReplicated,  // every rank holds all of it
  kOut,         // split along ne[1] (output rows of a 2-D weight, or a per-head vector)
  kIn,          // split along ne[0] (input columns: row-parallel output projections)
  kStack,       // split along ne[2] (MLA k_b / v_b per head)
  kExperts,     // ne[2] split over expert groups, and an FFN band of each expert
};

ShardAxis AxisFor(const TensorSpec& spec);

// What one rank holds, in model coordinates (begin + width along each split dimension).
struct RankShard {
  int rank = 0;
  int ranks = 1;
  int64_t head_begin = 0, n_heads = 0;               // attention heads, KDA and MLA alike
  int64_t dense_begin = 0, dense_width = 0;          // band of the dense FFN
  int64_t shared_begin = 0, shared_width = 0;        // band of the shared-expert FFN
  int64_t expert_begin = 0, n_experts = 0;           // routed experts of this rank's group
  int64_t expert_ffn_begin = 0, expert_ffn_width = 0;  // band of each routed expert's FFN
  int64_t vocab_begin = 0, vocab_width = 0;          // band of the embedding and LM head
};

// The shard of `rank` under `plan` (CheckPlan first).
RankShard ShardFor(const K3Config& config, const RankPlan& plan, int rank);

// Element ranges of `spec` that `rank` holds, as [begin, end) along the split dimension
// (ne[0], ne[1] or ne[2] per AxisFor; for kExperts two ranges: ne[2] experts and the FFN
// band along the expert's FFN dimension). Used to prove the plan tiles every tensor.
struct SliceRange {
  int dim = -1;  // -1: the whole tensor (replicated)
  int64_t begin = 0, end = 0;
  int dim2 = -1;  // a second split (experts: the FFN band), -1 if none
  int64_t begin2 = 0, end2 = 0;
};
SliceRange SliceOf(const K3Config& config, const TensorSpec& spec, const RankShard& shard);

// Whether an expert tensor's FFN band cuts its columns (ne[0]: ffn_down_exps reads the band) rather
// than its rows (gate and up write it); SliceOf's dim2.
bool ExpertBandCutsColumns(const TensorSpec& spec);

// Checks that every split divides evenly and keeps quant blocks whole.
absl::Status CheckPlan(const K3Config& config, const RankPlan& plan);

// Bytes of `spec` stored as `type` that one rank holds under `plan` (the same for every rank).
uint64_t RankBytes(const TensorSpec& spec, quant::GgmlType type, const RankPlan& plan);

std::string AxisName(ShardAxis axis);

}  // namespace k3::model
