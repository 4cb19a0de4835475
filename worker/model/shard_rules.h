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

// Checks that every split divides evenly and keeps quant blocks whole.
absl::Status CheckPlan(const K3Config& config, const RankPlan& plan);

// Bytes of `spec` stored as `type` that one rank holds under `plan` (the same for every rank).
uint64_t RankBytes(const TensorSpec& spec, quant::GgmlType type, const RankPlan& plan);

std::string AxisName(ShardAxis axis);

}  // namespace k3::model
