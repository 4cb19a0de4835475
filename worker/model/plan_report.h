// The shard plan in words and numbers, printed by every worker group at start: which rank
// holds what, bytes per rank, what is replicated, and the collectives of one token.
#pragma once

#include <string>

#include "worker/model/fit_check.h"
#include "worker/model/k3_config.h"
#include "worker/model/shard_rules.h"

namespace k3::model {

std::string DescribePlan(const K3Config& config, const RankPlan& plan, const TypeOf& type_of);

}  // namespace k3::model
