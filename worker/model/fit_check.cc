#include "worker/model/fit_check.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/quant/iq1s_ternary_layout.h"
#include "worker/common/status_macros.h"

namespace k3::model {
namespace {

double GiB(uint64_t b) { return static_cast<double>(b) / static_cast<double>(kGiB); }

// Activations of one prefill chunk on one rank, f32: the residual stream with its checkpoint
// bank, the widest per-rank projection outputs of a layer, the routed-expert scratch and the
// rank's band of logits for the chunk's last tokens.
uint64_t WorkBytes(const K3Config& c, const FitRequest& r) {
  const int64_t tp = r.plan.ranks;
  const int64_t T = r.prefill_chunk;
  const int64_t stream = c.hidden * (4 + c.max_checkpoints());
  const int64_t attn = std::max(6 * c.kda_inner() / tp,
                                c.n_heads / tp * (c.mla_qk_head_dim() + c.mla_row + c.v_head_dim) +
                                    c.q_lora_rank + c.mla_row);
  const int64_t ffn = std::max(2 * c.dense_ffn / tp, 2 * c.shared_ffn() / tp) +
                      c.n_experts_used * (c.expert_latent + 2 * c.expert_ffn);
  const uint64_t per_token = static_cast<uint64_t>(stream + attn + ffn) * 4;
  const uint64_t logits = static_cast<uint64_t>(r.n_seqs) * (c.vocab / tp) * 4;
  return per_token * T + logits;
}

// A rank's IQ1_S expert slice in the ternary form, where the engine makes it (the rank's rows wide
// enough: Iq1sTernaryTakesCols of its band's columns; down's FFN band cuts its columns), from its
// bytes as ggml rows (50 per 256 weights).
uint64_t TernaryRankBytes(const TensorSpec& spec, const RankPlan& plan, uint64_t ggml_bytes) {
  const int64_t cols = ExpertBandCutsColumns(spec) ? spec.ne[0] / plan.expert_bands() : spec.ne[0];
  if (!quant::Iq1sTernaryTakesCols(cols)) return ggml_bytes;
  const uint64_t rows = ggml_bytes / (static_cast<uint64_t>(cols) / 256 * 50);
  return rows * static_cast<uint64_t>(quant::Iq1sTernaryRowBytes(cols));
}

}  // namespace

bool FitReport::fits() const {
  return std::all_of(ranks.begin(), ranks.end(),
                     [&](const RankFit& f) { return f.total() <= request.device_bytes; });
}

std::string FitReport::Table() const {
  const FitRequest& r = request;
  std::string s = absl::StrFormat(
      "plan: %d ranks (attention TP %d, %d expert groups x %d FFN bands), context %d, %d "
      "sequence(s), prefill chunk %d, device %.1f GiB; model %.1f GiB\n",
      r.plan.ranks, r.plan.ranks, r.plan.expert_groups, r.plan.expert_bands(), r.context,
      r.n_seqs, r.prefill_chunk, GiB(r.device_bytes), GiB(model_bytes));
  absl::StrAppendFormat(&s, "%-5s %9s %11s %10s %10s %8s %8s %9s %10s\n", "rank", "weights",
                        "(replic.)", "MLA cache", "KDA state", "work", "reserve", "total",
                        "headroom");
  for (const RankFit& f : ranks) {
    const double head = GiB(r.device_bytes) - GiB(f.total());
    absl::StrAppendFormat(&s, "%-5d %9.2f %11.2f %10.2f %10.2f %8.2f %8.2f %9.2f %10.2f%s\n",
                          f.rank, GiB(f.weights), GiB(f.replicated), GiB(f.mla_cache),
                          GiB(f.kda_state), GiB(f.work), GiB(f.reserve), GiB(f.total()), head,
                          head < 0 ? "  DOES NOT FIT" : "");
  }
  absl::StrAppend(&s, "(GiB)\n");
  return s;
}

absl::StatusOr<FitReport> PlanFit(const K3Config& c, const TypeOf& type_of,
                                  const FitRequest& r) {
  K3_RETURN_IF_ERROR(CheckPlan(c, r.plan));
  if (r.context < 1 || r.n_seqs < 1 || r.prefill_chunk < 1) {
    return absl::InvalidArgumentError("context, sequences and prefill chunk must be >= 1");
  }
  FitReport report;
  report.request = r;
  RankFit base;
  for (const TensorSpec& spec : ExpectedTensors(c)) {
    const quant::GgmlType type = type_of(spec);
    report.model_bytes += quant::BytesFor(type, spec.n_elems()).value_or(0);
    uint64_t b = RankBytes(spec, type, r.plan);
    if (r.ternary_experts && AxisFor(spec) == ShardAxis::kExperts && type == quant::GgmlType::kIQ1_S) {
      b = TernaryRankBytes(spec, r.plan, b);
    }
    base.weights += b;
    if (AxisFor(spec) == ShardAxis::kReplicated) base.replicated += b;
  }
  const uint64_t seqs = static_cast<uint64_t>(r.n_seqs);
  base.mla_cache = static_cast<uint64_t>(c.n_mla_layers()) * c.mla_row * r.cache_elem_bytes *
                   static_cast<uint64_t>(r.context) * seqs;
  const uint64_t heads = c.n_heads / r.plan.ranks;
  const uint64_t state = heads * c.kda_head_dim * c.kda_head_dim * 4;
  const uint64_t conv = 3ull * (c.conv_kernel - 1) * (c.kda_inner() / r.plan.ranks) * 4;
  base.kda_state = static_cast<uint64_t>(c.n_kda_layers()) * (state + conv) * seqs;
  base.work = WorkBytes(c, r);
  base.reserve = r.runtime_reserve;
  for (int rank = 0; rank < r.plan.ranks; ++rank) {
    RankFit f = base;
    f.rank = rank;
    report.ranks.push_back(f);
  }
  return report;
}

absl::Status RequireFit(const FitReport& report) {
  for (const RankFit& f : report.ranks) {
    if (f.total() > report.request.device_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "rank %d needs %.2f GiB (weights %.2f, MLA cache %.2f, KDA state %.2f, work %.2f, "
          "reserve %.2f) but the device has %.2f GiB: short by %.2f GiB. Use more ranks, a "
          "shorter context or fewer sequences.",
          f.rank, GiB(f.total()), GiB(f.weights), GiB(f.mla_cache), GiB(f.kda_state),
          GiB(f.work), GiB(f.reserve), GiB(report.request.device_bytes),
          GiB(f.total() - report.request.device_bytes)));
    }
  }
  return absl::OkStatus();
}

}  // namespace k3::model
