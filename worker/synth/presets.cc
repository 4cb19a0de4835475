#include "worker/synth/presets.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace k3::synth {
namespace {

using model::K3Config;
using model::LayerKind;

// The real model's shared values; each preset then sets its widths.
K3Config Base(std::string name) {
  K3Config c = model::RealK3Config();
  c.name = std::move(name);
  c.bos_id = c.eos_id = c.pad_id = -1;  // no_vocab unless a vocabulary is supplied
  return c;
}

K3Config Tiny() {
  K3Config c = Base("k3-synth-tiny");
  c.n_layers = 4;
  c.layer_kinds = LayerPattern(4, false);
  c.hidden = 256;
  c.vocab = 2048;
  c.context_length = 4096;
  c.n_heads = 4;
  c.q_lora_rank = 128;
  c.kv_lora_rank = 256;
  c.mla_row = c.kv_lora_rank + c.qk_rope_dim;
  c.dense_ffn = 512;
  c.n_experts = 16;
  c.n_experts_used = 4;
  c.expert_ffn = 256;
  c.expert_latent = 256;
  c.res_block_size = 2;
  return c;
}

K3Config Small() {
  K3Config c = Base("k3-synth-small");
  c.n_layers = 8;
  c.layer_kinds = LayerPattern(8, false);
  c.hidden = 512;
  c.vocab = 4096;
  c.context_length = 4096;
  c.n_heads = 4;
  c.q_lora_rank = 256;
  c.dense_ffn = 1024;
  c.n_experts = 32;
  c.n_experts_used = 4;
  c.expert_ffn = 256;
  c.expert_latent = 256;
  c.res_block_size = 3;
  return c;
}

K3Config Tp8() {
  K3Config c = Small();
  c.name = "k3-synth-tp8";
  c.n_layers = 4;
  c.layer_kinds = LayerPattern(4, false);
  c.n_heads = 8;
  c.n_experts = 16;
  c.n_shared_experts = 1;
  c.expert_ffn = 2048;  // 8 bands of whole 256-blocks when experts are not split by group
  c.res_block_size = 2;
  return c;
}

K3Config Slice() {
  K3Config c = Base("k3-synth-slice");
  c.n_layers = 8;
  c.layer_kinds = LayerPattern(8, false);
  return c;
}

K3Config Full() {
  K3Config c = Base("k3-synth-full");
  c.layer_kinds = LayerPattern(c.n_layers, true);
  return c;
}

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(what); }

}  // namespace

std::vector<std::string> PresetNames() { return {"tiny", "small", "tp8", "slice", "full"}; }

absl::StatusOr<K3Config> PresetConfig(std::string_view name) {
  if (name == "tiny") return Tiny();
  if (name == "small") return Small();
  if (name == "tp8") return Tp8();
  if (name == "slice") return Slice();
  if (name == "full") return Full();
  return absl::InvalidArgumentError(absl::StrCat("unknown preset '", std::string(name), "'; known: ",
                                                 absl::StrJoin(PresetNames(), ", ")));
}

int DefaultShards(std::string_view preset) { return preset == "full" ? 14 : 1; }

std::vector<LayerKind> LayerPattern(int64_t n_layers, bool last_is_mla) {
  std::vector<LayerKind> kinds;
  for (int64_t il = 0; il < n_layers; ++il) {
    const bool mla = il % 4 == 3 || (last_is_mla && il == n_layers - 1);
    kinds.push_back(mla ? LayerKind::kMla : LayerKind::kKda);
  }
  return kinds;
}

absl::Status ApplyOverrides(const SizeOverrides& o, K3Config* c) {
  const auto set = [](const std::optional<int64_t>& v, int64_t* field) {
    if (v) *field = *v;
  };
  set(o.hidden, &c->hidden);
  set(o.heads, &c->n_heads);
  set(o.experts, &c->n_experts);
  set(o.experts_used, &c->n_experts_used);
  set(o.shared_experts, &c->n_shared_experts);
  set(o.latent, &c->expert_latent);
  set(o.expert_ffn, &c->expert_ffn);
  set(o.dense_ffn, &c->dense_ffn);
  set(o.dense_layers, &c->n_dense_layers);
  set(o.vocab, &c->vocab);
  set(o.ctx, &c->context_length);
  set(o.res_block, &c->res_block_size);
  set(o.q_lora, &c->q_lora_rank);
  if (o.kv_lora) {
    c->kv_lora_rank = *o.kv_lora;
    c->mla_row = c->kv_lora_rank + c->qk_rope_dim;
  }
  if (o.layers) {
    if (*o.layers < 1) return Bad("--layers must be >= 1");
    const bool last_mla = c->n_layers > 0 && c->layer_kinds.back() == LayerKind::kMla &&
                          (c->n_layers - 1) % 4 != 3;
    c->n_layers = *o.layers;
    c->layer_kinds = LayerPattern(c->n_layers, last_mla);
  }
  if (o.mla_layers) {
    c->layer_kinds.assign(c->n_layers, LayerKind::kKda);
    for (int64_t il : *o.mla_layers) {
      if (il < 0 || il >= c->n_layers) {
        return Bad(absl::StrCat("MLA layer ", il, " is outside 0..", c->n_layers - 1));
      }
      c->layer_kinds[il] = LayerKind::kMla;
    }
  }
  return CheckSynthConfig(*c);
}

absl::Status CheckSynthConfig(const K3Config& c) {
  const auto positive = [](int64_t v) { return v > 0; };
  const std::pair<const char*, int64_t> sizes[] = {
      {"hidden", c.hidden},          {"layers", c.n_layers},         {"heads", c.n_heads},
      {"vocab", c.vocab},            {"ctx", c.context_length},      {"res-block", c.res_block_size},
      {"kda head dim", c.kda_head_dim}, {"kv-lora", c.kv_lora_rank}, {"q-lora", c.q_lora_rank}};
  for (const auto& [name, v] : sizes) {
    if (!positive(v)) return Bad(absl::StrCat(name, " must be > 0 (is ", v, ")"));
  }
  for (int64_t v : {c.hidden, c.vocab, c.context_length, c.n_heads * c.kda_head_dim, c.dense_ffn, c.n_experts}) {
    if (v > 0xffffffffll) return Bad(absl::StrCat("size ", v, " does not fit GGUF's u32 keys"));
  }
  if (static_cast<int64_t>(c.layer_kinds.size()) != c.n_layers) return Bad("one layer kind per layer is needed");
  if (c.n_dense_layers < 0 || c.n_dense_layers > c.n_layers) return Bad("dense layers must be in 0..layers");
  if (c.n_dense_layers > 0 && !positive(c.dense_ffn)) return Bad("dense-ffn must be > 0");
  if (c.n_dense_layers < c.n_layers) {
    if (!positive(c.n_experts) || !positive(c.expert_ffn) || !positive(c.expert_latent)) {
      return Bad("experts, expert-ffn and latent must be > 0 with MoE layers");
    }
    if (c.n_experts_used < 1 || c.n_experts_used > c.n_experts) {
      return Bad(absl::StrCat("experts-used must be in 1..", c.n_experts, " (is ", c.n_experts_used, ")"));
    }
    if (c.n_shared_experts < 0) return Bad("shared-experts must be >= 0");
  }
  if (c.mla_row != c.kv_lora_rank + c.qk_rope_dim) return Bad("MLA row must be kv_lora + rope");
  return absl::OkStatus();
}

}  // namespace k3::synth
