#include "worker/engine/ffn_layers.h"

#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/moe_router.h"
#include "kernels/cpu/norm.h"

namespace k3::engine {
namespace {

// out (+)= down · situ(gate · x, up · x) for T rows of x.
void GatedFfn(const model::K3Config& c, const QuantMatrix& gate, const QuantMatrix& up,
              const QuantMatrix& down, const float* x, int64_t T, int64_t x_stride, float* out,
              int64_t out_stride) {
  const int64_t F = gate.rows;
  std::vector<float> g(T * F), u(T * F);
  quant::MatMul(gate, x, T, x_stride, g.data(), F);
  quant::MatMul(up, x, T, x_stride, u.data(), F);
  cpu::SituRow(g.data(), u.data(), c.situ_beta, c.situ_linear_beta, T * F, g.data());
  quant::MatMul(down, g.data(), T, F, out, out_stride);
}

}  // namespace

void DenseFfnForward(const LayerContext& ctx, const DenseFfnWeights& w, const float* h, float* out) {
  const int64_t T = ctx.batch.n_tokens(), H = ctx.config.hidden;
  GatedFfn(ctx.config, w.gate, w.up, w.down, h, T, H, out, H);
}

absl::Status MoeForward(const LayerContext& ctx, const MoeWeights& w, const float* h, float* out) {
  const model::K3Config& c = ctx.config;
  const model::RankShard& shard = ctx.shard;
  const int64_t T = ctx.batch.n_tokens(), H = c.hidden, E = c.n_experts, K = c.n_experts_used;
  const int64_t L = c.expert_latent;

  // Route on the full-width input (replicated: every rank makes the same choice).
  std::vector<float> logits(T * E), weights(T * K);
  std::vector<int32_t> ids(T * K);
  quant::MatMul(w.router, h, T, H, logits.data(), E);
  for (int64_t t = 0; t < T; ++t) {
    cpu::RouteToken({&logits[t * E], w.selection_bias.data(), E, K,
                     c.gating == model::GatingFunc::kSigmoid, c.expert_weights_norm,
                     c.expert_weights_scale, &ids[t * K], &weights[t * K]});
  }

  // This rank's experts (its group; its band of each expert's FFN) run in the latent space.
  // Tokens are grouped by expert so each expert's weights are read once per batch; a token sums
  // its experts in expert-index order whatever the batch, so its result does not depend on
  // what it is batched with. `reduce` holds [m: T x L | shared: T x H], the rank's partials,
  // summed over the group in ONE all-reduce before the routed norm (spec 4.6).
  std::vector<float> r(T * L), reduce(T * (L + H), 0.0f);
  float* m = reduce.data();
  float* sh = reduce.data() + T * L;
  quant::MatMul(w.routed_down, h, T, H, r.data(), L);
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(shard.n_experts);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < K; ++j) {
      const int64_t local = ids[t * K + j] - shard.expert_begin;
      if (local >= 0 && local < shard.n_experts) by_expert[local].push_back({t, weights[t * K + j]});
    }
  }
  std::vector<float> xe, ye;
  for (int64_t e = 0; e < shard.n_experts; ++e) {
    const auto& users = by_expert[e];
    if (users.empty()) continue;
    const int64_t n = static_cast<int64_t>(users.size());
    xe.resize(n * L);
    ye.resize(n * L);
    for (int64_t i = 0; i < n; ++i) std::copy(&r[users[i].first * L], &r[users[i].first * L] + L, &xe[i * L]);
    GatedFfn(c, w.gate_exps.at(e), w.up_exps.at(e), w.down_exps.at(e), xe.data(), n, L, ye.data(), L);
    for (int64_t i = 0; i < n; ++i) {
      float* mt = &m[users[i].first * L];
      const float wt = users[i].second;
      for (int64_t d = 0; d < L; ++d) mt[d] += wt * ye[i * L + d];
    }
  }
  // Shared experts read the full-width input; this rank holds one FFN band of them.
  if (w.has_shared) GatedFfn(c, w.shared_gate, w.shared_up, w.shared_down, h, T, H, sh, H);
  {
    TraceScope span(ctx.tracer, "all_reduce", "collective");
    if (absl::Status s = ctx.comm.AllReduceSum(reduce.data(), static_cast<int64_t>(reduce.size())); !s.ok()) {
      return s;
    }
  }
  if (w.has_routed_norm) {
    for (int64_t t = 0; t < T; ++t) cpu::RmsNorm(&m[t * L], w.routed_norm.data(), c.rms_eps, L, &m[t * L]);
  }
  quant::MatMul(w.routed_up, m, T, L, out, H);
  for (int64_t i = 0; i < T * H; ++i) out[i] += sh[i];
  return absl::OkStatus();
}

}  // namespace k3::engine
