#include "worker/model/shard_rules.h"

#include "absl/strings/str_cat.h"

namespace k3::model {
namespace {

bool Is(const TensorSpec& s, std::initializer_list<std::string_view> bases) {
  for (std::string_view b : bases) {
    if (s.base == b) return true;
  }
  return false;
}

}  // namespace

ShardAxis AxisFor(const TensorSpec& s) {
  if (s.role == TensorRole::kExperts) return ShardAxis::kExperts;
  if (s.role == TensorRole::kHeadStack) return ShardAxis::kStack;
  // Per-head and per-channel vectors of KDA follow their heads.
  if (Is(s, {"ssm_a", "ssm_dt"})) return ShardAxis::kOut;
  if (s.role == TensorRole::kConv) return ShardAxis::kOut;
  if (s.role == TensorRole::kVector) return ShardAxis::kReplicated;
  // Column-parallel: into head space / FFN bands / vocabulary bands.
  if (Is(s, {"attn_q", "attn_k", "attn_v", "ssm_f_b", "ssm_beta", "ssm_g", "attn_q_b",
             "attn_gate", "ffn_gate", "ffn_up", "ffn_gate_shexp", "ffn_up_shexp", "output",
             "token_embd"})) {
    return ShardAxis::kOut;
  }
  // Row-parallel: back out of head space / FFN bands, partial sums all-reduced.
  if (Is(s, {"attn_output", "ffn_down", "ffn_down_shexp"})) return ShardAxis::kIn;
  // Replicated: attn_q_a, attn_kv_a_mqa, ssm_f_a, ffn_gate_inp, ffn_routed_down, ffn_routed_up.
  return ShardAxis::kReplicated;
}

std::string AxisName(ShardAxis axis) {
  switch (axis) {
    case ShardAxis::kReplicated: return "replicated";
    case ShardAxis::kOut: return "split-out";
    case ShardAxis::kIn: return "split-in";
    case ShardAxis::kStack: return "split-heads";
    case ShardAxis::kExperts: return "experts";
  }
  return "?";
}

absl::Status CheckPlan(const K3Config& c, const RankPlan& p) {
  auto fail = [&](std::string what) {
    return absl::InvalidArgumentError(absl::StrCat("rank plan (", p.ranks, " ranks, ",
                                                   p.expert_groups, " expert groups): ", what));
  };
  if (p.ranks < 1 || p.expert_groups < 1) return fail("sizes must be >= 1");
  if (p.ranks % p.expert_groups != 0) return fail("expert groups must divide the rank count");
  if (c.n_heads % p.ranks != 0) {
    return fail(absl::StrCat(c.n_heads, " heads do not divide over ", p.ranks, " ranks"));
  }
  if (c.vocab % p.ranks != 0) {
    return fail(absl::StrCat("vocabulary ", c.vocab, " does not divide over ", p.ranks, " ranks"));
  }
  if (c.n_dense_layers > 0 && c.dense_ffn % (32 * p.ranks) != 0) {
    return fail(absl::StrCat("dense FFN ", c.dense_ffn, " does not split into ", p.ranks,
                             " bands of whole 32-blocks"));
  }
  if (c.n_dense_layers < c.n_layers) {
    if (c.n_experts % p.expert_groups != 0) {
      return fail(absl::StrCat(c.n_experts, " experts do not divide over ", p.expert_groups,
                               " groups"));
    }
    // An expert's FFN band must keep the 256-element blocks of ffn_down_exps whole.
    if (c.expert_ffn % (256 * p.expert_bands()) != 0 && p.expert_bands() > 1) {
      return fail(absl::StrCat("expert FFN ", c.expert_ffn, " does not split into ",
                               p.expert_bands(), " bands of whole 256-blocks"));
    }
    if (c.shared_ffn() % (32 * p.ranks) != 0) {
      return fail(absl::StrCat("shared-expert FFN ", c.shared_ffn(), " does not split into ",
                               p.ranks, " bands of whole 32-blocks"));
    }
  }
  // Row-parallel outputs split their input columns: keep whole 32-blocks.
  if ((c.n_heads / p.ranks) * c.kda_head_dim % 32 != 0 ||
      (c.n_heads / p.ranks) * c.v_head_dim % 32 != 0) {
    return fail("a rank's head band is not a whole number of 32-element blocks");
  }
  return absl::OkStatus();
}

uint64_t RankBytes(const TensorSpec& spec, quant::GgmlType type, const RankPlan& p) {
  const uint64_t total = quant::BytesFor(type, spec.n_elems()).value_or(0);
  switch (AxisFor(spec)) {
    case ShardAxis::kReplicated:
      return total;
    case ShardAxis::kOut:
    case ShardAxis::kIn:
    case ShardAxis::kStack:
      return total / p.ranks;
    case ShardAxis::kExperts:
      return total / p.expert_groups / p.expert_bands();
  }
  return total;
}

}  // namespace k3::model
