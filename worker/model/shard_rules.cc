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

bool ExpertBandCutsColumns(const TensorSpec& spec) { return spec.base == "ffn_down_exps"; }

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

RankShard ShardFor(const K3Config& c, const RankPlan& p, int rank) {
  RankShard s;
  s.rank = rank;
  s.ranks = p.ranks;
  s.n_heads = c.n_heads / p.ranks;
  s.head_begin = rank * s.n_heads;
  s.dense_width = c.dense_ffn / p.ranks;
  s.dense_begin = rank * s.dense_width;
  s.shared_width = c.shared_ffn() / p.ranks;
  s.shared_begin = rank * s.shared_width;
  const int bands = p.expert_bands();
  const int group = rank / bands, band = rank % bands;
  s.n_experts = c.n_experts / p.expert_groups;
  s.expert_begin = group * s.n_experts;
  s.expert_ffn_width = c.expert_ffn / bands;
  s.expert_ffn_begin = band * s.expert_ffn_width;
  s.vocab_width = c.vocab / p.ranks;
  s.vocab_begin = rank * s.vocab_width;
  return s;
}

SliceRange SliceOf(const K3Config& c, const TensorSpec& spec, const RankShard& s) {
  SliceRange r;
  const ShardAxis axis = AxisFor(spec);
  if (axis == ShardAxis::kReplicated) return r;
  if (axis == ShardAxis::kExperts) {
    r.dim = 2;
    r.begin = s.expert_begin;
    r.end = s.expert_begin + s.n_experts;
    r.dim2 = ExpertBandCutsColumns(spec) ? 0 : 1;
    r.begin2 = s.expert_ffn_begin;
    r.end2 = s.expert_ffn_begin + s.expert_ffn_width;
    return r;
  }
  if (axis == ShardAxis::kStack) {
    r.dim = 2;
    r.begin = s.head_begin;
    r.end = s.head_begin + s.n_heads;
    return r;
  }
  // Split along ne[1] (kOut; for 1-D per-head/per-channel vectors and convs, their last dim)
  // or ne[0] (kIn). The width of the split decides the unit: heads, channels, bands, vocab.
  r.dim = axis == ShardAxis::kIn ? 0 : static_cast<int>(spec.ne.size() == 1 ? 0 : spec.ne.size() - 1);
  if (spec.role == TensorRole::kConv) r.dim = 2;
  const int64_t n = spec.ne[r.dim];
  const int64_t width = n / s.ranks;
  r.begin = s.rank * width;
  r.end = r.begin + width;
  (void)c;
  return r;
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
