// The kimi-k3 hyperparameters, parsed from GGUF metadata into one typed struct.
// Every size the engine uses comes from here; nothing is hard-coded to the real model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace k3::gguf { class GgufFile; }

namespace k3::model {

enum class LayerKind { kKda, kMla };
enum class GatingFunc { kSoftmax = 1, kSigmoid = 2 };

struct K3Config {
  // ---- global ----
  int64_t n_layers = 0;          // block_count (93)
  int64_t hidden = 0;            // embedding_length (7168)
  int64_t vocab = 0;             // vocab_size, else token_embd ne[1] (163840)
  int64_t context_length = 0;    // context_length (1,048,576)
  int64_t n_heads = 0;           // attention.head_count, KDA and MLA alike (96)
  float rms_eps = 0;             // attention.layer_norm_rms_epsilon (1e-5)
  std::vector<LayerKind> layer_kinds;  // from attention.head_count_kv ONLY: 1 = MLA, 0 = KDA

  // ---- cross-layer residual mix and activation ----
  int64_t res_block_size = 0;    // attn_res.block_size (12): checkpoint every N layers
  float situ_beta = 0;           // activation.situ_beta (4)
  float situ_linear_beta = 0;    // activation.situ_linear_beta (25); <= 0: u unchanged

  // ---- MLA ----
  int64_t q_lora_rank = 0;       // attention.q_lora_rank (1536)
  int64_t kv_lora_rank = 0;      // attention.kv_lora_rank (512)
  int64_t qk_rope_dim = 0;       // rope.dimension_count (64): the unrotated "pe" part
  int64_t qk_nope_dim = 0;       // key_length_mla - rope (128)
  int64_t v_head_dim = 0;        // attention.value_length_mla (128)
  int64_t mla_row = 0;           // attention.key_length (576) = kv_lora + rope: one cache row

  // ---- KDA ----
  int64_t kda_head_dim = 0;      // kda.head_dim (128)
  int64_t conv_kernel = 0;       // ssm.conv_kernel (4)
  bool has_gate_lower_bound = false;  // kda.gate_lower_bound present (K3) or softplus gate
  float gate_lower_bound = 0;    // (-5)

  // ---- FFN / MoE ----
  int64_t n_dense_layers = 0;    // leading_dense_block_count (1)
  int64_t dense_ffn = 0;         // feed_forward_length (33792)
  int64_t n_experts = 0;         // expert_count (896)
  int64_t n_experts_used = 0;    // expert_used_count (16)
  int64_t n_shared_experts = 0;  // expert_shared_count (2)
  int64_t expert_ffn = 0;        // expert_feed_forward_length (3072)
  int64_t expert_latent = 0;     // expert_latent_length (3584): experts run at this width
  GatingFunc gating = GatingFunc::kSigmoid;  // expert_gating_func
  bool expert_weights_norm = false;          // expert_weights_norm
  float expert_weights_scale = 1.0f;         // expert_weights_scale

  // ---- tokenizer ids (-1 when absent) ----
  int64_t bos_id = -1, eos_id = -1, pad_id = -1;
  std::string name;              // general.name, for logs

  // ---- derived ----
  int64_t kda_inner() const { return n_heads * kda_head_dim; }         // d_inner (12288)
  int64_t mla_qk_head_dim() const { return qk_nope_dim + qk_rope_dim; }  // 192
  int64_t shared_ffn() const { return n_shared_experts * expert_ffn; }   // 6144
  bool is_mla(int64_t il) const { return layer_kinds[il] == LayerKind::kMla; }
  bool is_dense(int64_t il) const { return il < n_dense_layers; }
  int64_t n_mla_layers() const;
  int64_t n_kda_layers() const;
  // Index of layer il among the layers of its own kind (its slot in the MLA cache or KDA state).
  int64_t kind_index(int64_t il) const;
  // Checkpoints the residual bank can hold: ceil(n_layers / res_block_size).
  int64_t max_checkpoints() const { return (n_layers + res_block_size - 1) / res_block_size; }
  std::string Summary() const;
};

// Parses and cross-checks the kimi-k3 metadata. A missing required key, a key of the wrong
// type or inconsistent sizes give an error naming the key.
absl::StatusOr<K3Config> ParseK3Config(const gguf::GgufFile& file);

// The real Kimi K3 (spec section 1), for planning without a file.
K3Config RealK3Config();

}  // namespace k3::model
