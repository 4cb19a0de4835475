#include "worker/engine/mla_layer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/norm.h"

namespace k3::engine {

void MlaForward(const LayerContext& ctx, const MlaWeights& w, int64_t mla_index, const float* h,
                float* out) {
  const model::K3Config& c = ctx.config;
  const int64_t T = ctx.batch.n_tokens(), H = c.hidden, nh = ctx.shard.n_heads;  // this rank's heads
  const int64_t nope = c.qk_nope_dim, rope = c.qk_rope_dim, qk = c.mla_qk_head_dim();
  const int64_t lora = c.kv_lora_rank, row = c.mla_row, vd = c.v_head_dim, ql = c.q_lora_rank;
  const float eps = c.rms_eps;

  // Queries: q_b · rms_w(q_a · h).
  std::vector<float> qa(T * ql), qf(T * nh * qk);
  quant::MatMul(w.q_a, h, T, H, qa.data(), ql);
  for (int64_t t = 0; t < T; ++t) cpu::RmsNorm(&qa[t * ql], w.q_a_norm.data(), eps, ql, &qa[t * ql]);
  quant::MatMul(w.q_b, qa.data(), T, ql, qf.data(), nh * qk);

  // The cache row: rms_w(latent) | k_pe (not normalized, not rotated: K3 has no RoPE).
  std::vector<float> kv(T * row);
  quant::MatMul(w.kv_a, h, T, H, kv.data(), row);
  for (const TokenRun& run : ctx.batch.runs) {
    for (int64_t i = 0; i < run.count; ++i) {
      const float* src = &kv[(run.begin + i) * row];
      float* dst = ctx.cache.MlaRow(run.seq, mla_index, run.start_pos + i);
      cpu::RmsNorm(src, w.kv_a_norm.data(), eps, lora, dst);
      std::copy(src + lora, src + row, dst + lora);
    }
  }

  // Absorbed queries: Q[h] = (k_b[h] · q_nope[h]) | q_pe[h], one 576-wide vector per head.
  std::vector<float> q_abs(T * nh * row);
  for (int64_t hh = 0; hh < nh; ++hh) {
    quant::MatMul(w.k_b.at(hh), &qf[hh * qk], T, nh * qk, &q_abs[hh * row], nh * row);
    for (int64_t t = 0; t < T; ++t) {
      const float* pe = &qf[t * nh * qk + hh * qk + nope];
      std::copy(pe, pe + rope, &q_abs[t * nh * row + hh * row + lora]);
    }
  }

  // Attention over each sequence's rows 0..pos.
  std::vector<float> lat(T * nh * lora);
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk));
  for (const TokenRun& run : ctx.batch.runs) {
    const std::vector<const float*> pages = ctx.cache.MlaPages(run.seq, mla_index);
    for (int64_t i = 0; i < run.count; ++i) {
      const int64_t t = run.begin + i;
      cpu::MlaAttention({&q_abs[t * nh * row], pages.data(), ctx.cache.shape().page_size,
                         ctx.cache.page_row_stride(), run.start_pos + i + 1, row, lora, nh, scale,
                         &lat[t * nh * lora]});
    }
  }

  // Per head o = v_b[h] · lat[h], the sigmoid output gate (reads h), the output projection.
  std::vector<float> o(T * nh * vd);
  for (int64_t hh = 0; hh < nh; ++hh) {
    quant::MatMul(w.v_b.at(hh), &lat[hh * lora], T, nh * lora, &o[hh * vd], nh * vd);
  }
  if (w.has_gate) {
    std::vector<float> gate(T * nh * vd);
    quant::MatMul(w.gate, h, T, H, gate.data(), nh * vd);
    for (size_t i = 0; i < o.size(); ++i) o[i] *= cpu::Sigmoid(gate[i]);
  }
  quant::MatMul(w.out, o.data(), T, nh * vd, out, H);
}

}  // namespace k3::engine
