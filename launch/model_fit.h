// The fit check of every worker group, before anything starts. The model's shapes come from its
// GGUF header (opened header-only: no weights are read), or, for a synthetic model not generated
// yet, from its preset and quant mix (the 'full' preset is RealK3Config()). Every group's rank
// plan goes through k3::model::PlanFit (the shard rules must divide); cuda groups must also pass
// RequireFit against their GPU's memory. Errors name the YAML line of the model or the group.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/launch_config.h"
#include "worker/gguf/gguf_file.h"
#include "worker/model/fit_check.h"
#include "worker/model/k3_config.h"

namespace k3::launch {

struct ModelShapes {
  model::K3Config config;
  model::TypeOf type_of;
  std::shared_ptr<const gguf::GgufFile> file;  // keeps type_of's file alive (null for a preset)
  std::string source;                          // where the shapes came from, for the plan's text
};

absl::StatusOr<ModelShapes> LoadModelShapes(const LaunchConfig& config);

// What a group asks of each GPU: its rank plan, max_seqs sequences sharing cache_tokens (the
// worker's default when 0), the worker's prefill chunk, the GPU's memory, and the experts' ternary
// form when worker_args holds --ternary-experts.
model::FitRequest FitRequestFor(const WorkerGroupSpec& group, const model::K3Config& model,
                                const CoordinatorSpec& coordinator);

struct GroupFit {
  std::string group;
  model::FitReport report;
  bool checked_memory = false;  // cuda: RequireFit passed; cpu: only the shard plan was checked
};

absl::StatusOr<std::vector<GroupFit>> CheckGroupsFit(const LaunchConfig& config, const ModelShapes& shapes);

}  // namespace k3::launch
