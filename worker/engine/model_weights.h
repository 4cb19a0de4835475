// Typed views of a kimi-k3 model's tensors: 2-D weights stay quantized in the mapped file
// (QuantMatrix), small vectors are decoded to f32 once at load.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/quant/dot.h"
#include "worker/model/k3_config.h"
#include "worker/model/shard_rules.h"

namespace k3::gguf { class GgufFile; }

namespace k3::engine {

using quant::QuantMatrix;
using Vec = std::vector<float>;

// Stacked 3-D weights {in, out, n}: matrix `i` is `out` rows of `in`, one after another.
struct MatrixStack {
  quant::GgmlType type = quant::GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;          // out
  int64_t cols = 0;          // in
  int64_t count = 0;         // n (experts or heads)
  size_t row_bytes = 0;
  size_t matrix_stride = 0;  // bytes from one matrix to the next (> rows*row_bytes for a band)
  QuantMatrix at(int64_t i) const {
    return QuantMatrix{type, data + static_cast<size_t>(i) * matrix_stride, rows, cols, row_bytes};
  }
};

struct KdaWeights {
  QuantMatrix q, k, v;         // {hidden, d_inner}
  Vec conv_q, conv_k, conv_v;  // [d_inner][taps]
  QuantMatrix f_a;             // {hidden, head_dim}
  QuantMatrix f_b;             // {head_dim, d_inner}
  QuantMatrix beta;            // {hidden, n_heads}
  Vec a;                       // [n_heads]: -exp(A_log)
  Vec dt_bias;                 // [d_inner]
  QuantMatrix g;               // {hidden, d_inner}: output gate
  Vec norm;                    // [head_dim], shared by all heads
  QuantMatrix out;             // {d_inner, hidden}
};

struct MlaWeights {
  QuantMatrix q_a;             // {hidden, q_lora}
  Vec q_a_norm;                // [q_lora]
  QuantMatrix q_b;             // {q_lora, n_heads * (nope + rope)}
  QuantMatrix kv_a;            // {hidden, kv_lora + rope}
  Vec kv_a_norm;               // [kv_lora]
  MatrixStack k_b;             // per head: kv_lora rows of qk_nope
  MatrixStack v_b;             // per head: v_head_dim rows of kv_lora
  bool has_gate = false;
  QuantMatrix gate;            // {hidden, n_heads * v_head_dim}
  QuantMatrix out;             // {n_heads * v_head_dim, hidden}
};

struct DenseFfnWeights {
  QuantMatrix gate, up;        // {hidden, ffn}
  QuantMatrix down;            // {ffn, hidden}
};

struct MoeWeights {
  QuantMatrix router;          // {hidden, n_experts}
  Vec selection_bias;          // [n_experts]
  QuantMatrix routed_down;     // {hidden, latent}
  MatrixStack gate_exps, up_exps;  // per expert: ffn rows of latent
  MatrixStack down_exps;       // per expert: latent rows of ffn
  bool has_routed_norm = false;
  Vec routed_norm;             // [latent]
  QuantMatrix routed_up;       // {latent, hidden}
  bool has_shared = false;
  QuantMatrix shared_gate, shared_up;  // {hidden, shared_ffn}
  QuantMatrix shared_down;     // {shared_ffn, hidden}
};

struct LayerWeights {
  Vec attn_norm, ffn_norm, attn_res_score, ffn_res_score;  // [hidden]
  KdaWeights kda;              // when the layer is KDA
  MlaWeights mla;              // when the layer is MLA
  DenseFfnWeights dense;       // when il < n_dense_layers
  MoeWeights moe;              // otherwise
};

// Sizes below are this rank's: a row split keeps `rows` of the full matrix (pointing into
// the mapped file), a column split is copied into owned storage (only its bytes are read).
struct ModelWeights {
  QuantMatrix token_embd;      // {hidden, vocab band}
  QuantMatrix output;          // {hidden, vocab band}
  Vec output_norm, output_res_score;
  std::vector<LayerWeights> layers;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> owned;  // column-split copies
};

// Binds this rank's shard of every tensor of a validated file (ValidateManifest first). The
// file must outlive the result: row-split matrices point into its mapping.
absl::StatusOr<ModelWeights> BindWeights(const model::K3Config& config, const gguf::GgufFile& file,
                                         const model::RankShard& shard);

}  // namespace k3::engine
