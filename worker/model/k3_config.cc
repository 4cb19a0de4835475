#include "worker/model/k3_config.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/common/status_macros.h"
#include "worker/gguf/gguf_file.h"

namespace k3::model {
namespace {

constexpr std::string_view kArch = "kimi-k3";

std::string Key(std::string_view suffix) {
  return std::string(kArch) + "." + std::string(suffix);
}

// Reads a required u32 key as int64, naming the key when it is absent.
absl::StatusOr<int64_t> RequiredU32(const gguf::GgufFile& f, std::string_view suffix) {
  const std::string key = Key(suffix);
  if (!f.Has(key)) {
    return absl::InvalidArgumentError(absl::StrCat("required metadata key '", key,
                                                   "' is missing from ", f.shard_paths()[0]));
  }
  K3_ASSIGN_OR_RETURN(uint32_t v, f.GetU32(key));
  return static_cast<int64_t>(v);
}

absl::StatusOr<float> RequiredF32(const gguf::GgufFile& f, std::string_view suffix) {
  const std::string key = Key(suffix);
  if (!f.Has(key)) {
    return absl::InvalidArgumentError(absl::StrCat("required metadata key '", key,
                                                   "' is missing from ", f.shard_paths()[0]));
  }
  return f.GetF32(key);
}

absl::Status Check(bool ok, std::string_view key, std::string_view what) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("metadata key '", Key(key), "': ", std::string(what)));
}

absl::StatusOr<int64_t> OptionalTokenId(const gguf::GgufFile& f, std::string_view key) {
  if (!f.Has(key)) return -1;
  K3_ASSIGN_OR_RETURN(uint32_t v, f.GetU32(key));
  return static_cast<int64_t>(v);
}

}  // namespace

int64_t K3Config::n_mla_layers() const {
  int64_t n = 0;
  for (LayerKind k : layer_kinds) n += k == LayerKind::kMla;
  return n;
}

int64_t K3Config::n_kda_layers() const { return n_layers - n_mla_layers(); }

int64_t K3Config::kind_index(int64_t il) const {
  int64_t n = 0;
  for (int64_t i = 0; i < il; ++i) n += layer_kinds[i] == layer_kinds[il];
  return n;
}

std::string K3Config::Summary() const {
  std::string mla;
  for (int64_t il = 0; il < n_layers; ++il) {
    if (is_mla(il)) absl::StrAppend(&mla, mla.empty() ? "" : ",", il);
  }
  return absl::StrFormat(
      "kimi-k3 '%s': %d layers (%d KDA, %d MLA at {%s}), hidden %d, vocab %d, ctx %d, "
      "%d heads; MLA q_lora %d kv_lora %d qk %d+%d v %d row %d; KDA head %d conv %d gate_lb %s; "
      "dense %d x%d; MoE %d experts top-%d, %d shared, ffn %d, latent %d, %s%s scale %g; "
      "res block %d; situ %g/%g; eps %g",
      name, n_layers, n_kda_layers(), n_mla_layers(), mla, hidden, vocab, context_length,
      n_heads, q_lora_rank, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim, mla_row,
      kda_head_dim, conv_kernel,
      has_gate_lower_bound ? absl::StrCat(gate_lower_bound) : std::string("softplus"),
      n_dense_layers, dense_ffn, n_experts, n_experts_used, n_shared_experts, expert_ffn,
      expert_latent, gating == GatingFunc::kSigmoid ? "sigmoid" : "softmax",
      expert_weights_norm ? " normalized" : "", expert_weights_scale, res_block_size, situ_beta,
      situ_linear_beta, rms_eps);
}

absl::StatusOr<K3Config> ParseK3Config(const gguf::GgufFile& f) {
  K3Config c;
  K3_ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  if (arch != kArch) {
    return absl::InvalidArgumentError(absl::StrCat("general.architecture is '", arch,
                                                   "', expected 'kimi-k3' (", f.shard_paths()[0],
                                                   ")"));
  }
  if (f.Has("general.name")) {
    K3_ASSIGN_OR_RETURN(c.name, f.GetString("general.name"));
  }
  K3_ASSIGN_OR_RETURN(c.n_layers, RequiredU32(f, "block_count"));
  K3_ASSIGN_OR_RETURN(c.hidden, RequiredU32(f, "embedding_length"));
  K3_ASSIGN_OR_RETURN(c.context_length, RequiredU32(f, "context_length"));
  K3_ASSIGN_OR_RETURN(c.n_heads, RequiredU32(f, "attention.head_count"));
  K3_ASSIGN_OR_RETURN(c.rms_eps, RequiredF32(f, "attention.layer_norm_rms_epsilon"));

  // Layer kinds come only from the head_count_kv array (trap 1: never from a layer list).
  const std::string kv_key = Key("attention.head_count_kv");
  if (!f.Has(kv_key)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "required metadata key '", kv_key, "' (per-layer array: 1 = MLA, 0 = KDA) is missing"));
  }
  if (f.TypeOf(kv_key) != gguf::ValueType::kArray) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata key '", kv_key, "' must be a per-layer u32 array (1 = MLA, 0 = KDA); a scalar "
        "cannot say which layers are MLA"));
  }
  // Converters write this array as i32 or u32 (llama.cpp reads either); take both, nothing else.
  std::vector<int64_t> kv;
  if (f.ArrayTypeOf(kv_key) == gguf::ValueType::kI32) {
    K3_ASSIGN_OR_RETURN(std::vector<int32_t> v, f.GetArrayI32(kv_key));
    kv.assign(v.begin(), v.end());
  } else {
    K3_ASSIGN_OR_RETURN(std::vector<uint32_t> v, f.GetArrayU32(kv_key));
    kv.assign(v.begin(), v.end());
  }
  K3_RETURN_IF_ERROR(Check(static_cast<int64_t>(kv.size()) == c.n_layers,
                           "attention.head_count_kv",
                           absl::StrCat("has ", kv.size(), " entries for ", c.n_layers, " layers")));
  for (size_t il = 0; il < kv.size(); ++il) {
    K3_RETURN_IF_ERROR(Check(kv[il] == 0 || kv[il] == 1, "attention.head_count_kv",
                             absl::StrCat("entry ", il, " is ", kv[il], "; only 0 (KDA) or 1 (MLA)")));
    c.layer_kinds.push_back(kv[il] == 1 ? LayerKind::kMla : LayerKind::kKda);
  }

  K3_ASSIGN_OR_RETURN(c.res_block_size, RequiredU32(f, "attn_res.block_size"));
  K3_ASSIGN_OR_RETURN(c.situ_beta, RequiredF32(f, "activation.situ_beta"));
  K3_ASSIGN_OR_RETURN(c.situ_linear_beta, RequiredF32(f, "activation.situ_linear_beta"));

  K3_ASSIGN_OR_RETURN(c.q_lora_rank, RequiredU32(f, "attention.q_lora_rank"));
  K3_ASSIGN_OR_RETURN(c.kv_lora_rank, RequiredU32(f, "attention.kv_lora_rank"));
  K3_ASSIGN_OR_RETURN(c.qk_rope_dim, RequiredU32(f, "rope.dimension_count"));
  K3_ASSIGN_OR_RETURN(int64_t key_length_mla, RequiredU32(f, "attention.key_length_mla"));
  K3_ASSIGN_OR_RETURN(c.v_head_dim, RequiredU32(f, "attention.value_length_mla"));
  K3_ASSIGN_OR_RETURN(c.mla_row, RequiredU32(f, "attention.key_length"));
  K3_ASSIGN_OR_RETURN(int64_t value_length, RequiredU32(f, "attention.value_length"));
  c.qk_nope_dim = key_length_mla - c.qk_rope_dim;

  K3_ASSIGN_OR_RETURN(c.kda_head_dim, RequiredU32(f, "kda.head_dim"));
  K3_ASSIGN_OR_RETURN(c.conv_kernel, RequiredU32(f, "ssm.conv_kernel"));
  if (f.Has(Key("kda.gate_lower_bound"))) {
    c.has_gate_lower_bound = true;
    K3_ASSIGN_OR_RETURN(c.gate_lower_bound, f.GetF32(Key("kda.gate_lower_bound")));
  }

  K3_ASSIGN_OR_RETURN(c.n_dense_layers, RequiredU32(f, "leading_dense_block_count"));
  K3_ASSIGN_OR_RETURN(c.dense_ffn, RequiredU32(f, "feed_forward_length"));
  K3_ASSIGN_OR_RETURN(c.n_experts, RequiredU32(f, "expert_count"));
  K3_ASSIGN_OR_RETURN(c.n_experts_used, RequiredU32(f, "expert_used_count"));
  K3_ASSIGN_OR_RETURN(c.n_shared_experts, RequiredU32(f, "expert_shared_count"));
  K3_ASSIGN_OR_RETURN(c.expert_ffn, RequiredU32(f, "expert_feed_forward_length"));
  K3_ASSIGN_OR_RETURN(c.expert_latent, RequiredU32(f, "expert_latent_length"));
  K3_ASSIGN_OR_RETURN(int64_t gating, RequiredU32(f, "expert_gating_func"));
  K3_RETURN_IF_ERROR(Check(gating == 1 || gating == 2, "expert_gating_func",
                           absl::StrCat("is ", gating, "; only 1 (softmax) or 2 (sigmoid)")));
  c.gating = static_cast<GatingFunc>(gating);
  if (f.Has(Key("expert_weights_norm"))) {
    K3_ASSIGN_OR_RETURN(c.expert_weights_norm, f.GetBool(Key("expert_weights_norm")));
  }
  if (f.Has(Key("expert_weights_scale"))) {
    K3_ASSIGN_OR_RETURN(c.expert_weights_scale, f.GetF32(Key("expert_weights_scale")));
  }

  // The vocabulary: vocab_size, else the embedding's row count.
  if (f.Has(Key("vocab_size"))) {
    K3_ASSIGN_OR_RETURN(c.vocab, RequiredU32(f, "vocab_size"));
  } else if (const gguf::TensorInfo* t = f.FindTensor("token_embd.weight");
             t != nullptr && t->ne.size() >= 2) {
    c.vocab = t->ne[1];
  } else {
    return absl::InvalidArgumentError(
        "the vocabulary size is unknown: neither 'kimi-k3.vocab_size' nor token_embd.weight");
  }
  K3_ASSIGN_OR_RETURN(c.bos_id, OptionalTokenId(f, "tokenizer.ggml.bos_token_id"));
  K3_ASSIGN_OR_RETURN(c.eos_id, OptionalTokenId(f, "tokenizer.ggml.eos_token_id"));
  K3_ASSIGN_OR_RETURN(c.pad_id, OptionalTokenId(f, "tokenizer.ggml.padding_token_id"));

  // ---- cross-checks: sizes that must agree with each other ----
  auto positive = [](int64_t v) { return v > 0; };
  K3_RETURN_IF_ERROR(Check(positive(c.n_layers), "block_count", "must be > 0"));
  K3_RETURN_IF_ERROR(Check(positive(c.hidden), "embedding_length", "must be > 0"));
  K3_RETURN_IF_ERROR(Check(positive(c.n_heads), "attention.head_count", "must be > 0"));
  K3_RETURN_IF_ERROR(Check(positive(c.vocab), "vocab_size", "must be > 0"));
  K3_RETURN_IF_ERROR(Check(positive(c.res_block_size), "attn_res.block_size", "must be > 0"));
  K3_RETURN_IF_ERROR(Check(c.rms_eps > 0, "attention.layer_norm_rms_epsilon", "must be > 0"));
  K3_RETURN_IF_ERROR(Check(positive(c.kda_head_dim), "kda.head_dim", "must be > 0"));
  K3_RETURN_IF_ERROR(Check(c.conv_kernel > 0 && c.conv_kernel <= 16, "ssm.conv_kernel",
                           "must be in 1..16"));
  K3_RETURN_IF_ERROR(Check(c.mla_row == c.kv_lora_rank + c.qk_rope_dim, "attention.key_length",
                           absl::StrCat("is ", c.mla_row, "; the MLA cache row must be kv_lora_rank + "
                                        "rope.dimension_count = ", c.kv_lora_rank + c.qk_rope_dim,
                                        " (MLA is stored as MQA: key_length is the latent row)")));
  K3_RETURN_IF_ERROR(Check(value_length == c.kv_lora_rank, "attention.value_length",
                           absl::StrCat("is ", value_length, "; must equal kv_lora_rank ",
                                        c.kv_lora_rank)));
  K3_RETURN_IF_ERROR(Check(c.qk_nope_dim > 0, "attention.key_length_mla",
                           "must exceed rope.dimension_count"));
  if (c.n_mla_layers() > 0) {
    K3_RETURN_IF_ERROR(Check(positive(c.q_lora_rank), "attention.q_lora_rank", "must be > 0"));
    K3_RETURN_IF_ERROR(Check(positive(c.v_head_dim), "attention.value_length_mla", "must be > 0"));
  }
  K3_RETURN_IF_ERROR(Check(c.n_dense_layers <= c.n_layers, "leading_dense_block_count",
                           "exceeds block_count"));
  if (c.n_dense_layers < c.n_layers) {
    K3_RETURN_IF_ERROR(Check(positive(c.n_experts), "expert_count", "must be > 0"));
    K3_RETURN_IF_ERROR(Check(c.n_experts_used > 0 && c.n_experts_used <= c.n_experts,
                             "expert_used_count", "must be in 1..expert_count"));
    K3_RETURN_IF_ERROR(Check(positive(c.expert_ffn), "expert_feed_forward_length", "must be > 0"));
    K3_RETURN_IF_ERROR(Check(positive(c.expert_latent), "expert_latent_length", "must be > 0"));
  }
  if (c.n_dense_layers > 0) {
    K3_RETURN_IF_ERROR(Check(positive(c.dense_ffn), "feed_forward_length", "must be > 0"));
  }
  return c;
}

K3Config RealK3Config() {
  K3Config c;
  c.name = "Kimi K3 (real shapes)";
  c.n_layers = 93;
  c.hidden = 7168;
  c.vocab = 163840;
  c.context_length = 1048576;
  c.n_heads = 96;
  c.rms_eps = 1e-5f;
  // MLA at 0-based 3, 7, ..., 91 and 92 (HF's 1-indexed full_attn_layers, trap 1).
  for (int64_t il = 0; il < c.n_layers; ++il) {
    const bool mla = (il % 4 == 3) || il == 92;
    c.layer_kinds.push_back(mla ? LayerKind::kMla : LayerKind::kKda);
  }
  c.res_block_size = 12;
  c.situ_beta = 4.0f;
  c.situ_linear_beta = 25.0f;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_rope_dim = 64;
  c.qk_nope_dim = 128;
  c.v_head_dim = 128;
  c.mla_row = 576;
  c.kda_head_dim = 128;
  c.conv_kernel = 4;
  c.has_gate_lower_bound = true;
  c.gate_lower_bound = -5.0f;
  c.n_dense_layers = 1;
  c.dense_ffn = 33792;
  c.n_experts = 896;
  c.n_experts_used = 16;
  c.n_shared_experts = 2;
  c.expert_ffn = 3072;
  c.expert_latent = 3584;
  c.gating = GatingFunc::kSigmoid;
  c.expert_weights_norm = true;
  c.expert_weights_scale = 1.0f;
  c.bos_id = 163584;
  c.eos_id = 163586;
  c.pad_id = 163839;
  return c;
}

}  // namespace k3::model
