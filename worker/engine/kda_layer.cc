#include "worker/engine/kda_layer.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/kda.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/short_conv.h"

namespace k3::engine {

void KdaForward(const LayerContext& ctx, const KdaWeights& w, int64_t kda_index, const float* h,
                float* out) {
  const model::K3Config& c = ctx.config;
  const int64_t nh = ctx.shard.n_heads;  // this rank's heads
  const int64_t T = ctx.batch.n_tokens(), H = c.hidden, D = nh * c.kda_head_dim;
  const int64_t hd = c.kda_head_dim, taps = c.conv_kernel;
  const float eps = c.rms_eps;

  // Projections, then the causal short conv (with each sequence's history) and SiLU.
  std::vector<float> proj(T * D), q(T * D), k(T * D), v(T * D);
  const QuantMatrix* mats[3] = {&w.q, &w.k, &w.v};
  const float* conv_w[3] = {w.conv_q.data(), w.conv_k.data(), w.conv_v.data()};
  float* conv_out[3] = {q.data(), k.data(), v.data()};
  for (int which = 0; which < 3; ++which) {
    quant::MatMul(*mats[which], h, T, H, proj.data(), D);
    for (const TokenRun& run : ctx.batch.runs) {
      float* history = ctx.cache.ConvHistory(run.seq, kda_index) + which * (taps - 1) * D;
      cpu::ShortConvSilu({conv_w[which], history, proj.data() + run.begin * D,
                          conv_out[which] + run.begin * D, D, taps, run.count, D, D});
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t hh = 0; hh < nh; ++hh) {
      cpu::L2Norm(&q[t * D + hh * hd], eps, hd, &q[t * D + hh * hd]);
      cpu::L2Norm(&k[t * D + hh * hd], eps, hd, &k[t * D + hh * hd]);
    }
  }

  // Decay gate g (per key channel) and beta (per head).
  std::vector<float> fa(T * hd), g(T * D), beta(T * nh);
  quant::MatMul(w.f_a, h, T, H, fa.data(), hd);
  quant::MatMul(w.f_b, fa.data(), T, hd, g.data(), D);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t ch = 0; ch < D; ++ch) {
      const float pre = g[t * D + ch] + w.dt_bias[ch];
      const float a = w.a[ch / hd];  // -exp(A_log) < 0
      g[t * D + ch] = c.has_gate_lower_bound ? c.gate_lower_bound * cpu::Sigmoid(-(a * pre))
                                             : a * cpu::Softplus(pre);
    }
  }
  quant::MatMul(w.beta, h, T, H, beta.data(), nh);
  for (float& b : beta) b = cpu::Sigmoid(b);

  // The recurrence, per sequence: chunked for a prompt run, token by token for decode.
  std::vector<float> o(T * D);
  for (const TokenRun& run : ctx.batch.runs) {
    const int64_t r = run.begin;
    cpu::KdaParams p{ctx.cache.KdaState(run.seq, kda_index),
                     &q[r * D], &k[r * D], &g[r * D], &v[r * D], &beta[r * nh], &o[r * D],
                     D, D, nh, D, nh, hd, hd, run.count, 1.0f / std::sqrt(static_cast<float>(hd))};
    if (run.count > 1) {
      cpu::KdaChunked(p, ctx.kda_chunk);
    } else {
      cpu::KdaRecurrent(p);
    }
  }

  // Gated RMS norm per head, then the output projection.
  quant::MatMul(w.g, h, T, H, proj.data(), D);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t hh = 0; hh < nh; ++hh) {
      float* oh = &o[t * D + hh * hd];
      cpu::RmsNorm(oh, w.norm.data(), eps, hd, oh);
      for (int64_t j = 0; j < hd; ++j) oh[j] *= cpu::Sigmoid(proj[t * D + hh * hd + j]);
    }
  }
  quant::MatMul(w.out, o.data(), T, D, out, H);
}

}  // namespace k3::engine
