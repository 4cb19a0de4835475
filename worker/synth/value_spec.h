// What values each tensor of a synthetic kimi-k3 model holds: a distribution per tensor,
// chosen so that a random model behaves like a model (activations O(1) through every layer,
// routing and residual mixing not on a knife edge). The reasoning and the measurements behind
// each number are in value_spec.cc.
#pragma once

#include "worker/model/k3_config.h"
#include "worker/model/tensor_manifest.h"

namespace k3::synth {

enum class ValueKind {
  kNormal,          // mean + std * N(0, 1)
  kNegExpUniform,   // -exp(U(lo, hi)): ssm_a = -exp(A_log)
};

struct ValueSpec {
  ValueKind kind = ValueKind::kNormal;
  float mean = 0.0f;
  float std = 0.0f;
  float lo = 0.0f, hi = 0.0f;
};

ValueSpec ValueSpecFor(const model::K3Config& config, const model::TensorSpec& spec);

}  // namespace k3::synth
