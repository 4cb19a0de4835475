// Which tensors a rank binds and which slice of each it holds (spec: the tensor table; shard
// rules: worker/model/shard_rules.h), written once for every source of weights. A binder `B` takes
// tensors by GGUF name and returns this rank's slice:
//   Vector(name[, begin, n])        f32 vector (or its elements [begin, begin + n))
//   Matrix(name)                    the whole matrix
//   Rows(name, begin, n)            rows [begin, begin + n)
//   Cols(name, begin, n)            columns [begin, begin + n) of every row
//   Stack(name, begin, n[, f0, fw]) matrices [begin, begin + n) of a 3-D stack (rows [f0, f0 + fw))
//   StackCols(name, begin, n, f0, fw)  the same with a band of columns
//   Has(name)                       whether an optional tensor is there
// Used by engine::BindWeights (views into a GGUF mapping) and the CUDA engine's synthetic shard
// (SynthHost: the same slices generated without a file), so both hold the same tensors.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/common/status_macros.h"
#include "worker/engine/model_weights.h"
#include "worker/model/k3_config.h"
#include "worker/model/shard_rules.h"

namespace k3::engine {

inline std::string BlockTensorName(int64_t il, const char* rest) { return absl::StrCat("blk.", il, ".", rest); }

// The model-wide tensors: embedding and LM head rows of this rank's vocabulary band, final norm.
template <class B>
absl::Status BindGlobals(B& b, const model::RankShard& s, ModelWeights& w) {
  K3_ASSIGN_OR_RETURN(w.token_embd, b.Rows("token_embd.weight", s.vocab_begin, s.vocab_width));
  K3_ASSIGN_OR_RETURN(w.output, b.Rows("output.weight", s.vocab_begin, s.vocab_width));
  K3_ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight"));
  K3_ASSIGN_OR_RETURN(w.output_res_score, b.Vector("output_res_score.weight"));
  return absl::OkStatus();
}

template <class B>
absl::Status BindKda(B& b, const model::K3Config& c, const model::RankShard& s, int64_t il, KdaWeights& w) {
  const auto n = [il](const char* rest) { return BlockTensorName(il, rest); };
  const int64_t hd = c.kda_head_dim, c0 = s.head_begin * hd, cn = s.n_heads * hd;
  const int64_t taps = c.conv_kernel;
  K3_ASSIGN_OR_RETURN(w.q, b.Rows(n("attn_q.weight"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.k, b.Rows(n("attn_k.weight"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.v, b.Rows(n("attn_v.weight"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.conv_q, b.Vector(n("ssm_conv1d_q.weight"), c0 * taps, cn * taps));
  K3_ASSIGN_OR_RETURN(w.conv_k, b.Vector(n("ssm_conv1d_k.weight"), c0 * taps, cn * taps));
  K3_ASSIGN_OR_RETURN(w.conv_v, b.Vector(n("ssm_conv1d_v.weight"), c0 * taps, cn * taps));
  K3_ASSIGN_OR_RETURN(w.f_a, b.Matrix(n("ssm_f_a.weight")));
  K3_ASSIGN_OR_RETURN(w.f_b, b.Rows(n("ssm_f_b.weight"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.beta, b.Rows(n("ssm_beta.weight"), s.head_begin, s.n_heads));
  K3_ASSIGN_OR_RETURN(w.a, b.Vector(n("ssm_a"), s.head_begin, s.n_heads));
  K3_ASSIGN_OR_RETURN(w.dt_bias, b.Vector(n("ssm_dt.bias"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.g, b.Rows(n("ssm_g.weight"), c0, cn));
  K3_ASSIGN_OR_RETURN(w.norm, b.Vector(n("ssm_norm.weight")));
  K3_ASSIGN_OR_RETURN(w.out, b.Cols(n("attn_output.weight"), c0, cn));
  return absl::OkStatus();
}

template <class B>
absl::Status BindMla(B& b, const model::K3Config& c, const model::RankShard& s, int64_t il, MlaWeights& w) {
  const auto n = [il](const char* rest) { return BlockTensorName(il, rest); };
  const int64_t qk = c.mla_qk_head_dim(), vd = c.v_head_dim;
  K3_ASSIGN_OR_RETURN(w.q_a, b.Matrix(n("attn_q_a.weight")));
  K3_ASSIGN_OR_RETURN(w.q_a_norm, b.Vector(n("attn_q_a_norm.weight")));
  K3_ASSIGN_OR_RETURN(w.q_b, b.Rows(n("attn_q_b.weight"), s.head_begin * qk, s.n_heads * qk));
  K3_ASSIGN_OR_RETURN(w.kv_a, b.Matrix(n("attn_kv_a_mqa.weight")));
  K3_ASSIGN_OR_RETURN(w.kv_a_norm, b.Vector(n("attn_kv_a_norm.weight")));
  K3_ASSIGN_OR_RETURN(w.k_b, b.Stack(n("attn_k_b.weight"), s.head_begin, s.n_heads));
  K3_ASSIGN_OR_RETURN(w.v_b, b.Stack(n("attn_v_b.weight"), s.head_begin, s.n_heads));
  w.has_gate = b.Has(n("attn_gate.weight"));
  if (w.has_gate) {
    K3_ASSIGN_OR_RETURN(w.gate, b.Rows(n("attn_gate.weight"), s.head_begin * vd, s.n_heads * vd));
  }
  K3_ASSIGN_OR_RETURN(w.out, b.Cols(n("attn_output.weight"), s.head_begin * vd, s.n_heads * vd));
  return absl::OkStatus();
}

template <class B>
absl::Status BindDense(B& b, const model::RankShard& s, int64_t il, DenseFfnWeights& w) {
  const auto n = [il](const char* rest) { return BlockTensorName(il, rest); };
  K3_ASSIGN_OR_RETURN(w.gate, b.Rows(n("ffn_gate.weight"), s.dense_begin, s.dense_width));
  K3_ASSIGN_OR_RETURN(w.up, b.Rows(n("ffn_up.weight"), s.dense_begin, s.dense_width));
  K3_ASSIGN_OR_RETURN(w.down, b.Cols(n("ffn_down.weight"), s.dense_begin, s.dense_width));
  return absl::OkStatus();
}

template <class B>
absl::Status BindMoe(B& b, const model::RankShard& s, int64_t il, MoeWeights& w) {
  const auto n = [il](const char* rest) { return BlockTensorName(il, rest); };
  K3_ASSIGN_OR_RETURN(w.router, b.Matrix(n("ffn_gate_inp.weight")));
  K3_ASSIGN_OR_RETURN(w.selection_bias, b.Vector(n("exp_probs_b.bias")));
  K3_ASSIGN_OR_RETURN(w.routed_down, b.Matrix(n("ffn_routed_down.weight")));
  const int64_t e0 = s.expert_begin, ne = s.n_experts, f0 = s.expert_ffn_begin, fw = s.expert_ffn_width;
  K3_ASSIGN_OR_RETURN(w.gate_exps, b.Stack(n("ffn_gate_exps.weight"), e0, ne, f0, fw));
  K3_ASSIGN_OR_RETURN(w.up_exps, b.Stack(n("ffn_up_exps.weight"), e0, ne, f0, fw));
  K3_ASSIGN_OR_RETURN(w.down_exps, b.StackCols(n("ffn_down_exps.weight"), e0, ne, f0, fw));
  w.has_routed_norm = b.Has(n("ffn_routed_norm.weight"));
  if (w.has_routed_norm) {
    K3_ASSIGN_OR_RETURN(w.routed_norm, b.Vector(n("ffn_routed_norm.weight")));
  }
  K3_ASSIGN_OR_RETURN(w.routed_up, b.Matrix(n("ffn_routed_up.weight")));
  w.has_shared = b.Has(n("ffn_gate_shexp.weight"));
  if (w.has_shared) {
    K3_ASSIGN_OR_RETURN(w.shared_gate, b.Rows(n("ffn_gate_shexp.weight"), s.shared_begin, s.shared_width));
    K3_ASSIGN_OR_RETURN(w.shared_up, b.Rows(n("ffn_up_shexp.weight"), s.shared_begin, s.shared_width));
    K3_ASSIGN_OR_RETURN(w.shared_down, b.Cols(n("ffn_down_shexp.weight"), s.shared_begin, s.shared_width));
  }
  return absl::OkStatus();
}

// Layer il: its norms and residual-mix scores, then attention (MLA or KDA) and FFN (dense or MoE).
template <class B>
absl::Status BindLayer(B& b, const model::K3Config& c, const model::RankShard& s, int64_t il, LayerWeights& l) {
  K3_ASSIGN_OR_RETURN(l.attn_norm, b.Vector(BlockTensorName(il, "attn_norm.weight")));
  K3_ASSIGN_OR_RETURN(l.ffn_norm, b.Vector(BlockTensorName(il, "ffn_norm.weight")));
  K3_ASSIGN_OR_RETURN(l.attn_res_score, b.Vector(BlockTensorName(il, "attn_res_score.weight")));
  K3_ASSIGN_OR_RETURN(l.ffn_res_score, b.Vector(BlockTensorName(il, "ffn_res_score.weight")));
  K3_RETURN_IF_ERROR(c.is_mla(il) ? BindMla(b, c, s, il, l.mla) : BindKda(b, c, s, il, l.kda));
  K3_RETURN_IF_ERROR(c.is_dense(il) ? BindDense(b, s, il, l.dense) : BindMoe(b, s, il, l.moe));
  return absl::OkStatus();
}

}  // namespace k3::engine
