#include "worker/engine/engine.h"

#include <algorithm>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/residual_mix.h"
#include "kernels/quant/dequantize.h"
#include "worker/common/status_macros.h"
#include "worker/engine/ffn_layers.h"
#include "worker/engine/kda_layer.h"
#include "worker/engine/layer_context.h"
#include "worker/engine/mla_layer.h"
#include "worker/engine/token_batch.h"
#include "worker/gguf/gguf_file.h"
#include "worker/model/tensor_manifest.h"

namespace k3::engine {

Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Open(const std::string& path,
                                                     const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  K3_ASSIGN_OR_RETURN(e->file_, gguf::GgufFile::Open(path));
  K3_ASSIGN_OR_RETURN(e->config_, model::ParseK3Config(*e->file_));
  K3_RETURN_IF_ERROR(model::ValidateManifest(e->config_, *e->file_));
  const model::K3Config& c = e->config_;
  K3_RETURN_IF_ERROR(model::CheckPlan(c, options.plan));
  if (options.rank < 0 || options.rank >= options.plan.ranks) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " outside the plan's ", options.plan.ranks, " ranks"));
  }
  if (options.comm == nullptr) {
    if (options.plan.ranks != 1) return absl::InvalidArgumentError("a plan of several ranks needs a communicator");
    e->own_comm_ = coll::MakeLocalCommunicator();
    e->comm_ = e->own_comm_.get();
  } else {
    if (options.comm->size() != options.plan.ranks || options.comm->rank() != options.rank) {
      return absl::InvalidArgumentError(absl::StrCat("communicator is rank ", options.comm->rank(), " of ",
                                                     options.comm->size(), ", the plan says rank ", options.rank,
                                                     " of ", options.plan.ranks));
    }
    e->comm_ = options.comm;
  }
  e->shard_ = model::ShardFor(c, options.plan, options.rank);
  K3_ASSIGN_OR_RETURN(e->weights_, BindWeights(c, *e->file_, e->shard_));
  e->options_ = options;
  if (options.max_seqs < 1 || options.page_size < 1 || options.kda_chunk < 1) {
    return absl::InvalidArgumentError("engine options: max_seqs, page_size, kda_chunk must be >= 1");
  }
  int64_t cache_tokens = options.cache_tokens;
  if (cache_tokens <= 0) cache_tokens = options.max_seqs * std::min<int64_t>(c.context_length, 1 << 20);
  CacheShape shape;
  shape.n_mla_layers = c.n_mla_layers();
  shape.mla_row = c.mla_row;
  shape.page_size = options.page_size;
  shape.n_pages = (cache_tokens + options.page_size - 1) / options.page_size;
  shape.n_kda_layers = c.n_kda_layers();
  shape.kda_heads = e->shard_.n_heads;
  shape.kda_head_dim = c.kda_head_dim;
  shape.conv_taps = c.conv_kernel - 1;
  shape.max_seqs = options.max_seqs;
  e->cache_ = std::make_unique<SequenceCache>(shape);
  return e;
}

// Each rank holds a vocabulary band of the embedding: it writes the rows of its tokens, zeros
// elsewhere, and the all-reduce assembles every row.
absl::Status Engine::Embed(const TokenBatch& batch, float* x) {
  const QuantMatrix& emb = weights_.token_embd;
  const int64_t H = config_.hidden;
  for (int64_t t = 0; t < batch.n_tokens(); ++t) {
    const int64_t local = batch.tokens[t] - shard_.vocab_begin;
    if (local >= 0 && local < shard_.vocab_width) {
      quant::DequantizeRow(emb.type, static_cast<const uint8_t*>(emb.data) + local * emb.row_bytes, x + t * H, H);
    } else {
      std::fill(x + t * H, x + (t + 1) * H, 0.0f);
    }
  }
  return comm_->AllReduceSum(x, batch.n_tokens() * H);
}

absl::StatusOr<ForwardResult> Engine::Forward(std::span<const SeqInput> inputs) {
  const model::K3Config& c = config_;
  if (inputs.empty()) return absl::InvalidArgumentError("empty batch");
  // ---- validate everything before any state changes ----
  std::unordered_set<SeqId> seen;
  TokenBatch batch;
  for (const SeqInput& in : inputs) {
    if (!cache_->Contains(in.seq)) return absl::NotFoundError(absl::StrCat("unknown sequence ", in.seq));
    if (!seen.insert(in.seq).second) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", in.seq, " appears twice in one batch"));
    }
    if (in.tokens.empty()) return absl::InvalidArgumentError(absl::StrCat("sequence ", in.seq, ": no tokens"));
    const int64_t pos = cache_->Length(in.seq);
    if (pos + static_cast<int64_t>(in.tokens.size()) > c.context_length) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", in.seq, ": ", pos, " + ", in.tokens.size(),
                                                     " tokens exceed the context length ", c.context_length));
    }
    for (int32_t tok : in.tokens) {
      if (tok < 0 || tok >= c.vocab) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", in.seq, ": token id ", tok,
                                                       " outside the vocabulary [0, ", c.vocab, ")"));
      }
    }
    batch.runs.push_back({in.seq, batch.n_tokens(), static_cast<int64_t>(in.tokens.size()), pos});
    batch.tokens.insert(batch.tokens.end(), in.tokens.begin(), in.tokens.end());
  }
  // Pages first: a full cache fails here, before any state is written. (Pages a failed call
  // reserved stay with their sequences and serve its next call.)
  for (const TokenRun& r : batch.runs) K3_RETURN_IF_ERROR(cache_->Reserve(r.seq, r.count));

  // ---- the layers ----
  Tracer* tr = options_.tracer;
  TraceScope step_span(tr, "forward", "step", batch.n_tokens());
  const int64_t T = batch.n_tokens(), H = c.hidden;
  std::vector<float> x(T * H), cur(T * H), hbuf(T * H), delta(T * H);
  {
    TraceScope span(tr, "embed", "layer");
    K3_RETURN_IF_ERROR(Embed(batch, x.data()));
  }
  std::vector<std::vector<float>> bank;  // raw checkpoints, each [T][H]
  std::vector<const float*> bank_rows;
  auto mix = [&](const std::vector<float>& score_w, const std::vector<float>& src, std::vector<float>& dst) {
    const int n = static_cast<int>(bank.size());
    bank_rows.resize(n);
    for (int64_t t = 0; t < T; ++t) {
      for (int i = 0; i < n; ++i) bank_rows[i] = bank[i].data() + t * H;
      cpu::ResidualMix(bank_rows.data(), n, &src[t * H], score_w.data(), c.rms_eps, H, &dst[t * H]);
    }
  };
  auto norm = [&](const std::vector<float>& w, const std::vector<float>& src, std::vector<float>& dst) {
    for (int64_t t = 0; t < T; ++t) cpu::RmsNorm(&src[t * H], w.data(), c.rms_eps, H, &dst[t * H]);
  };
  LayerContext ctx{c, shard_, *comm_, batch, *cache_, options_.kda_chunk, tr};
  for (int64_t il = 0; il < c.n_layers; ++il) {
    const LayerWeights& lw = weights_.layers[il];
    mix(lw.attn_res_score, x, cur);                 // before the push below
    const bool banked = il % c.res_block_size == 0;
    if (banked) bank.push_back(x);                  // the RAW layer input
    norm(lw.attn_norm, cur, hbuf);
    if (c.is_mla(il)) {
      TraceScope span(tr, "mla", "layer", il);
      MlaForward(ctx, lw.mla, c.kind_index(il), hbuf.data(), delta.data());
    } else {
      TraceScope span(tr, "kda", "layer", il);
      KdaForward(ctx, lw.kda, c.kind_index(il), hbuf.data(), delta.data());
    }
    {
      TraceScope span(tr, "all_reduce", "collective", il);
      K3_RETURN_IF_ERROR(comm_->AllReduceSum(delta.data(), T * H));  // the heads' partial sums
    }
    if (banked) {
      x = delta;                                    // a banked layer restarts the stream
    } else {
      for (int64_t i = 0; i < T * H; ++i) x[i] += delta[i];
    }
    mix(lw.ffn_res_score, x, cur);
    norm(lw.ffn_norm, cur, hbuf);
    if (c.is_dense(il)) {
      TraceScope span(tr, "dense_ffn", "layer", il);
      DenseFfnForward(ctx, lw.dense, hbuf.data(), delta.data());
      TraceScope reduce(tr, "all_reduce", "collective", il);
      K3_RETURN_IF_ERROR(comm_->AllReduceSum(delta.data(), T * H));  // the FFN bands' partials
    } else {
      TraceScope span(tr, "moe", "layer", il);
      K3_RETURN_IF_ERROR(MoeForward(ctx, lw.moe, hbuf.data(), delta.data()));
    }
    for (int64_t i = 0; i < T * H; ++i) x[i] += delta[i];
  }

  // ---- the output rows: final mix, norm, logits ----
  ForwardResult result;
  result.vocab = c.vocab;
  result.band_begin = shard_.vocab_begin;
  result.band_width = shard_.vocab_width;
  std::vector<int64_t> out_tokens;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TokenRun& r = batch.runs[i];
    result.first_row.push_back(static_cast<int64_t>(out_tokens.size()));
    const int64_t n = inputs[i].all_logits ? r.count : 1;
    result.n_rows.push_back(n);
    for (int64_t j = r.count - n; j < r.count; ++j) out_tokens.push_back(r.begin + j);
  }
  const int64_t R = static_cast<int64_t>(out_tokens.size());
  std::vector<float> y(R * H);
  bank_rows.resize(bank.size());
  for (int64_t k = 0; k < R; ++k) {
    const int64_t t = out_tokens[k];
    for (size_t i = 0; i < bank.size(); ++i) bank_rows[i] = bank[i].data() + t * H;
    cpu::ResidualMix(bank_rows.data(), static_cast<int>(bank.size()), &x[t * H],
                     weights_.output_res_score.data(), c.rms_eps, H, &y[k * H]);
    cpu::RmsNorm(&y[k * H], weights_.output_norm.data(), c.rms_eps, H, &y[k * H]);
  }
  TraceScope head_span(tr, "lm_head", "layer");
  result.logits.resize(R * shard_.vocab_width);
  quant::MatMul(weights_.output, y.data(), R, H, result.logits.data(), shard_.vocab_width);

  for (const TokenRun& r : batch.runs) cache_->Commit(r.seq, r.count);
  return result;
}

}  // namespace k3::engine
