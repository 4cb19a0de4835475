#include "worker/engine_cuda/synth_shard.h"

namespace k3::engine_cuda {

namespace {
std::string Blk(int64_t il, const char* rest) { return absl::StrCat("blk.", il, ".", rest); }
}  // namespace

absl::Status SynthLayer(SynthHost& b, const model::K3Config& c, const model::RankShard& s, int64_t il,
                        engine::LayerWeights& l) {
  K3_ASSIGN_OR_RETURN(l.attn_norm, b.Vector(Blk(il, "attn_norm.weight")));
  K3_ASSIGN_OR_RETURN(l.ffn_norm, b.Vector(Blk(il, "ffn_norm.weight")));
  K3_ASSIGN_OR_RETURN(l.attn_res_score, b.Vector(Blk(il, "attn_res_score.weight")));
  K3_ASSIGN_OR_RETURN(l.ffn_res_score, b.Vector(Blk(il, "ffn_res_score.weight")));
  if (c.is_mla(il)) {
    engine::MlaWeights& w = l.mla;
    const int64_t qk = c.mla_qk_head_dim(), vd = c.v_head_dim;
    K3_ASSIGN_OR_RETURN(w.q_a, b.Matrix(Blk(il, "attn_q_a.weight")));
    K3_ASSIGN_OR_RETURN(w.q_a_norm, b.Vector(Blk(il, "attn_q_a_norm.weight")));
    K3_ASSIGN_OR_RETURN(w.q_b, b.Rows(Blk(il, "attn_q_b.weight"), s.head_begin * qk, s.n_heads * qk));
    K3_ASSIGN_OR_RETURN(w.kv_a, b.Matrix(Blk(il, "attn_kv_a_mqa.weight")));
    K3_ASSIGN_OR_RETURN(w.kv_a_norm, b.Vector(Blk(il, "attn_kv_a_norm.weight")));
    K3_ASSIGN_OR_RETURN(w.k_b, b.Stack(Blk(il, "attn_k_b.weight"), s.head_begin, s.n_heads));
    K3_ASSIGN_OR_RETURN(w.v_b, b.Stack(Blk(il, "attn_v_b.weight"), s.head_begin, s.n_heads));
    w.has_gate = b.Has(Blk(il, "attn_gate.weight"));
    if (w.has_gate) {
      K3_ASSIGN_OR_RETURN(w.gate, b.Rows(Blk(il, "attn_gate.weight"), s.head_begin * vd, s.n_heads * vd));
    }
    K3_ASSIGN_OR_RETURN(w.out, b.Cols(Blk(il, "attn_output.weight"), s.head_begin * vd, s.n_heads * vd));
  } else {
    engine::KdaWeights& w = l.kda;
    const int64_t hd = c.kda_head_dim, c0 = s.head_begin * hd, cn = s.n_heads * hd, taps = c.conv_kernel;
    K3_ASSIGN_OR_RETURN(w.q, b.Rows(Blk(il, "attn_q.weight"), c0, cn));
    K3_ASSIGN_OR_RETURN(w.k, b.Rows(Blk(il, "attn_k.weight"), c0, cn));
    K3_ASSIGN_OR_RETURN(w.v, b.Rows(Blk(il, "attn_v.weight"), c0, cn));
    K3_ASSIGN_OR_RETURN(w.conv_q, b.Vector(Blk(il, "ssm_conv1d_q.weight"), c0 * taps, cn * taps));
    K3_ASSIGN_OR_RETURN(w.conv_k, b.Vector(Blk(il, "ssm_conv1d_k.weight"), c0 * taps, cn * taps));
    K3_ASSIGN_OR_RETURN(w.conv_v, b.Vector(Blk(il, "ssm_conv1d_v.weight"), c0 * taps, cn * taps));
    K3_ASSIGN_OR_RETURN(w.f_a, b.Matrix(Blk(il, "ssm_f_a.weight")));
    K3_ASSIGN_OR_RETURN(w.f_b, b.Rows(Blk(il, "ssm_f_b.weight"), c0, cn));
    K3_ASSIGN_OR_RETURN(w.beta, b.Rows(Blk(il, "ssm_beta.weight"), s.head_begin, s.n_heads));
    K3_ASSIGN_OR_RETURN(w.a, b.Vector(Blk(il, "ssm_a"), s.head_begin, s.n_heads));
    K3_ASSIGN_OR_RETURN(w.dt_bias, b.Vector(Blk(il, "ssm_dt.bias"), c0, cn));
    K3_ASSIGN_OR_RETURN(w.g, b.Rows(Blk(il, "ssm_g.weight"), c0, cn));
    K3_ASSIGN_OR_RETURN(w.norm, b.Vector(Blk(il, "ssm_norm.weight")));
    K3_ASSIGN_OR_RETURN(w.out, b.Cols(Blk(il, "attn_output.weight"), c0, cn));
  }
  if (c.is_dense(il)) {
    K3_ASSIGN_OR_RETURN(l.dense.gate, b.Rows(Blk(il, "ffn_gate.weight"), s.dense_begin, s.dense_width));
    K3_ASSIGN_OR_RETURN(l.dense.up, b.Rows(Blk(il, "ffn_up.weight"), s.dense_begin, s.dense_width));
    K3_ASSIGN_OR_RETURN(l.dense.down, b.Cols(Blk(il, "ffn_down.weight"), s.dense_begin, s.dense_width));
  } else {
    engine::MoeWeights& w = l.moe;
    const int64_t e0 = s.expert_begin, ne = s.n_experts, f0 = s.expert_ffn_begin, fw = s.expert_ffn_width;
    K3_ASSIGN_OR_RETURN(w.router, b.Matrix(Blk(il, "ffn_gate_inp.weight")));
    K3_ASSIGN_OR_RETURN(w.selection_bias, b.Vector(Blk(il, "exp_probs_b.bias")));
    K3_ASSIGN_OR_RETURN(w.routed_down, b.Matrix(Blk(il, "ffn_routed_down.weight")));
    K3_ASSIGN_OR_RETURN(w.gate_exps, b.Stack(Blk(il, "ffn_gate_exps.weight"), e0, ne, f0, fw));
    K3_ASSIGN_OR_RETURN(w.up_exps, b.Stack(Blk(il, "ffn_up_exps.weight"), e0, ne, f0, fw));
    K3_ASSIGN_OR_RETURN(w.down_exps, b.StackCols(Blk(il, "ffn_down_exps.weight"), e0, ne, f0, fw));
    w.has_routed_norm = b.Has(Blk(il, "ffn_routed_norm.weight"));
    if (w.has_routed_norm) { K3_ASSIGN_OR_RETURN(w.routed_norm, b.Vector(Blk(il, "ffn_routed_norm.weight"))); }
    K3_ASSIGN_OR_RETURN(w.routed_up, b.Matrix(Blk(il, "ffn_routed_up.weight")));
    w.has_shared = b.Has(Blk(il, "ffn_gate_shexp.weight"));
    if (w.has_shared) {
      K3_ASSIGN_OR_RETURN(w.shared_gate, b.Rows(Blk(il, "ffn_gate_shexp.weight"), s.shared_begin, s.shared_width));
      K3_ASSIGN_OR_RETURN(w.shared_up, b.Rows(Blk(il, "ffn_up_shexp.weight"), s.shared_begin, s.shared_width));
      K3_ASSIGN_OR_RETURN(w.shared_down, b.Cols(Blk(il, "ffn_down_shexp.weight"), s.shared_begin, s.shared_width));
    }
  }
  return absl::OkStatus();
}

}  // namespace k3::engine_cuda
