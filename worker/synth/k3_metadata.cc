#include "worker/synth/k3_metadata.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/common/status_macros.h"

namespace k3::synth {
namespace {

std::string Key(const char* suffix) { return std::string("kimi-k3.") + suffix; }

// Every size goes out as u32, as the parser wants it.
absl::Status U32(gguf::GgufWriter& w, const char* suffix, int64_t v) {
  if (v < 0 || v > 0xffffffffll) {
    return absl::InvalidArgumentError(absl::StrCat("metadata ", Key(suffix), " = ", v, " does not fit a u32"));
  }
  return w.SetU32(Key(suffix), static_cast<uint32_t>(v));
}

}  // namespace

absl::Status SetK3Metadata(const model::K3Config& c, const GgufVocab* vocab, gguf::GgufWriter& w) {
  if (static_cast<int64_t>(c.layer_kinds.size()) != c.n_layers) {
    return absl::InvalidArgumentError("config: layer_kinds does not have one entry per layer");
  }
  // The order of the golden file (and of llama.cpp's converter).
  K3_RETURN_IF_ERROR(w.SetString("general.architecture", "kimi-k3"));
  K3_RETURN_IF_ERROR(U32(w, "context_length", c.context_length));
  K3_RETURN_IF_ERROR(U32(w, "embedding_length", c.hidden));
  K3_RETURN_IF_ERROR(U32(w, "block_count", c.n_layers));
  K3_RETURN_IF_ERROR(U32(w, "feed_forward_length", c.dense_ffn));
  K3_RETURN_IF_ERROR(U32(w, "attention.head_count", c.n_heads));
  std::vector<int32_t> kv;
  for (model::LayerKind k : c.layer_kinds) kv.push_back(k == model::LayerKind::kMla ? 1 : 0);
  K3_RETURN_IF_ERROR(w.SetArray(Key("attention.head_count_kv"), kv));
  K3_RETURN_IF_ERROR(U32(w, "attention.key_length", c.mla_row));
  K3_RETURN_IF_ERROR(U32(w, "attention.value_length", c.kv_lora_rank));
  K3_RETURN_IF_ERROR(U32(w, "attention.key_length_mla", c.mla_qk_head_dim()));
  K3_RETURN_IF_ERROR(U32(w, "attention.value_length_mla", c.v_head_dim));
  K3_RETURN_IF_ERROR(U32(w, "attention.q_lora_rank", c.q_lora_rank));
  K3_RETURN_IF_ERROR(U32(w, "attention.kv_lora_rank", c.kv_lora_rank));
  K3_RETURN_IF_ERROR(w.SetF32(Key("attention.layer_norm_rms_epsilon"), c.rms_eps));
  K3_RETURN_IF_ERROR(U32(w, "rope.dimension_count", c.qk_rope_dim));
  K3_RETURN_IF_ERROR(U32(w, "ssm.conv_kernel", c.conv_kernel));
  K3_RETURN_IF_ERROR(U32(w, "kda.head_dim", c.kda_head_dim));
  if (c.has_gate_lower_bound) {
    K3_RETURN_IF_ERROR(w.SetF32(Key("kda.gate_lower_bound"), c.gate_lower_bound));
  }
  K3_RETURN_IF_ERROR(U32(w, "expert_count", c.n_experts));
  K3_RETURN_IF_ERROR(U32(w, "expert_used_count", c.n_experts_used));
  K3_RETURN_IF_ERROR(U32(w, "expert_shared_count", c.n_shared_experts));
  K3_RETURN_IF_ERROR(U32(w, "expert_feed_forward_length", c.expert_ffn));
  K3_RETURN_IF_ERROR(U32(w, "leading_dense_block_count", c.n_dense_layers));
  K3_RETURN_IF_ERROR(w.SetF32(Key("expert_weights_scale"), c.expert_weights_scale));
  K3_RETURN_IF_ERROR(w.SetBool(Key("expert_weights_norm"), c.expert_weights_norm));
  K3_RETURN_IF_ERROR(U32(w, "expert_gating_func", static_cast<int64_t>(c.gating)));
  K3_RETURN_IF_ERROR(U32(w, "expert_latent_length", c.expert_latent));
  K3_RETURN_IF_ERROR(U32(w, "attn_res.block_size", c.res_block_size));
  K3_RETURN_IF_ERROR(w.SetF32(Key("activation.situ_beta"), c.situ_beta));
  K3_RETURN_IF_ERROR(w.SetF32(Key("activation.situ_linear_beta"), c.situ_linear_beta));
  K3_RETURN_IF_ERROR(U32(w, "vocab_size", c.vocab));
  if (vocab == nullptr) {
    K3_RETURN_IF_ERROR(w.SetString("tokenizer.ggml.model", "no_vocab"));
  } else {
    if (static_cast<int64_t>(vocab->tokens.size()) != c.vocab) {
      return absl::InvalidArgumentError(absl::StrCat("the vocabulary has ", vocab->tokens.size(),
                                                     " tokens; the model's vocab size is ", c.vocab));
    }
    K3_RETURN_IF_ERROR(w.SetString("tokenizer.ggml.model", "gpt2"));
    K3_RETURN_IF_ERROR(w.SetString("tokenizer.ggml.pre", vocab->pre));
    K3_RETURN_IF_ERROR(w.SetArray("tokenizer.ggml.tokens", vocab->tokens));
    K3_RETURN_IF_ERROR(w.SetArray("tokenizer.ggml.token_type", vocab->token_types));
    K3_RETURN_IF_ERROR(w.SetArray("tokenizer.ggml.merges", vocab->merges));
    K3_RETURN_IF_ERROR(w.SetU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab->bos_id)));
    K3_RETURN_IF_ERROR(w.SetU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab->eos_id)));
    K3_RETURN_IF_ERROR(w.SetU32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(vocab->pad_id)));
  }
  if (!c.name.empty()) K3_RETURN_IF_ERROR(w.SetString("general.name", c.name));
  return absl::OkStatus();
}

}  // namespace k3::synth
