// Every tensor a kimi-k3 file must hold, with its shape, derived from the config alone
// (spec section 3), and the check of a file's tensor table against it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/quant/ggml_type.h"
#include "worker/model/k3_config.h"

namespace k3::gguf { class GgufFile; }

namespace k3::model {

// What a tensor is, which decides the types it may have and how it is sharded.
enum class TensorRole {
  kVector,     // norms, biases, scores, ssm_a: 1-D, F32 (or F16/BF16)
  kConv,       // KDA short-conv taps {K, 1, d_inner}
  kMatrix,     // a 2-D weight {in, out}
  kExperts,    // stacked routed experts {in, out, n_expert}
  kHeadStack,  // MLA attn_k_b / attn_v_b: {in, out, n_heads}
};

struct TensorSpec {
  std::string name;          // e.g. "blk.3.attn_q_b.weight"
  std::string base;          // the name without "blk.N." and suffix, e.g. "attn_q_b"
  int64_t layer = -1;        // -1 for global tensors
  std::vector<int64_t> ne;   // ggml order
  TensorRole role = TensorRole::kMatrix;
  bool optional = false;     // attn_gate and ffn_routed_norm may be absent
  uint64_t n_elems() const;
};

// The full list, in the order a file would hold them (global first, then per layer).
std::vector<TensorSpec> ExpectedTensors(const K3Config& config);

// Types a tensor of `role` may be stored in.
bool TypeAllowed(TensorRole role, quant::GgmlType type);

// Checks the file's tensors against ExpectedTensors: every required tensor present with the
// right shape (trailing 1-dims ignored) and an allowed type; no unknown tensors. The error
// lists every problem found, not just the first.
absl::Status ValidateManifest(const K3Config& config, const gguf::GgufFile& file);

}  // namespace k3::model
