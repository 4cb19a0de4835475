#include "worker/model/plan_report.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace k3::model {

std::string DescribePlan(const K3Config& c, const RankPlan& p, const TypeOf& type_of) {
  std::string s = absl::StrFormat(
      "shard plan: %d rank(s); attention heads split %d per rank; routed experts in %d group(s) of "
      "%d, each expert's FFN in %d band(s); dense FFN, shared experts and vocabulary split %d ways\n",
      p.ranks, c.n_heads / p.ranks, p.expert_groups, c.n_experts / std::max(1, p.expert_groups),
      p.expert_bands(), p.ranks);
  for (int r = 0; r < p.ranks; ++r) {
    const RankShard sh = ShardFor(c, p, r);
    absl::StrAppendFormat(&s, "  rank %d: heads [%d, %d), experts [%d, %d) FFN band [%d, %d), vocab [%d, %d)\n", r,
                          sh.head_begin, sh.head_begin + sh.n_heads, sh.expert_begin,
                          sh.expert_begin + sh.n_experts, sh.expert_ffn_begin,
                          sh.expert_ffn_begin + sh.expert_ffn_width, sh.vocab_begin,
                          sh.vocab_begin + sh.vocab_width);
  }
  // Bytes per rank by axis, and what replication costs.
  std::map<std::string, uint64_t> by_axis;
  uint64_t per_rank = 0, replicated = 0;
  for (const TensorSpec& spec : ExpectedTensors(c)) {
    const quant::GgmlType t = type_of(spec);
    const uint64_t b = RankBytes(spec, t, p);
    per_rank += b;
    by_axis[AxisName(AxisFor(spec))] += b;
    if (AxisFor(spec) == ShardAxis::kReplicated) replicated += b;
  }
  absl::StrAppendFormat(&s, "  weights per rank: %.3f GiB (", static_cast<double>(per_rank) / kGiB);
  bool first = true;
  for (const auto& [axis, b] : by_axis) {
    absl::StrAppendFormat(&s, "%s%s %.3f", first ? "" : ", ", axis, static_cast<double>(b) / kGiB);
    first = false;
  }
  absl::StrAppendFormat(&s, "); replicated on every rank: %.3f GiB (router, latent projections, MLA down-projections, "
                        "ssm_f_a, norms), costing %.3f GiB over the group\n",
                        static_cast<double>(replicated) / kGiB,
                        static_cast<double>(replicated) * (p.ranks - 1) / kGiB);
  const int64_t moe_layers = c.n_layers - c.n_dense_layers;
  absl::StrAppendFormat(
      &s,
      "  collectives per forward pass: %d all-reduces = 1 embedding (%d floats/token) + %d attention (%d "
      "floats/token) + %d dense FFN (%d floats/token) + %d MoE (%d floats/token: latent partials + shared "
      "partials, fused)\n",
      1 + 2 * c.n_layers, c.hidden, c.n_layers, c.hidden, c.n_dense_layers, c.hidden, moe_layers,
      c.expert_latent + c.hidden);
  return s;
}

}  // namespace k3::model
