// Named kimi-k3 shapes for the synthetic generator, and size overrides on top of them.
//
//   tiny   CI: hidden 256, 4 layers (MLA at 3), 4 heads, 16 experts top-4, latent 256,
//          expert FFN 256, vocab 2048, residual block 2: a few MB, every block constraint met
//          (routed experts stay IQ1_S).
//   small  the golden model's shapes: hidden 512, 8 layers (MLA at 3, 7), 32 experts top-4,
//          latent 256, vocab 4096, residual block 3.
//   tp8    8 heads for 8-rank tensor parallelism: hidden 512, 4 layers, 16 experts top-4 with
//          a 2048-wide FFN (1 shared), so any expert-group count of 8 ranks keeps whole IQ1_S
//          blocks in every FFN band.
//   slice  the real widths (hidden 7168, 96 heads, 896 experts top-16, latent 3584, vocab
//          163840, dense FFN 33792 on layer 0) with 8 layers; --layers N keeps 3 KDA : 1 MLA.
//   full   RealK3Config(): 93 layers, 553 GiB at UD-IQ1_S.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/k3_config.h"

namespace k3::synth {

std::vector<std::string> PresetNames();
absl::StatusOr<model::K3Config> PresetConfig(std::string_view name);
// Shards the preset is written in by default (full: 14, like the published UD-IQ1_S).
int DefaultShards(std::string_view preset);

// MLA at every il % 4 == 3 (the real 3 KDA : 1 MLA rhythm); also the last layer when
// last_is_mla (the real model's layer 92).
std::vector<model::LayerKind> LayerPattern(int64_t n_layers, bool last_is_mla);

// Sizes to change; unset ones keep the preset's.
struct SizeOverrides {
  std::optional<int64_t> hidden, layers, heads, experts, experts_used, shared_experts, latent, expert_ffn,
      dense_ffn, dense_layers, vocab, ctx, res_block, q_lora, kv_lora;
  std::optional<std::vector<int64_t>> mla_layers;  // explicit 0-based MLA layers
};

// Applies the overrides. A new layer count re-derives the MLA layers with LayerPattern (the
// last layer stays MLA when it was in the preset), unless mla_layers gives them.
absl::Status ApplyOverrides(const SizeOverrides& o, model::K3Config* config);

// What ParseK3Config or the manifest would refuse, said before anything is written.
absl::Status CheckSynthConfig(const model::K3Config& config);

}  // namespace k3::synth
