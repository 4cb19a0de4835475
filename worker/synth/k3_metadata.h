// The GGUF metadata of a kimi-k3 model: every key ParseK3Config reads, with the value types the
// converter (and the golden file) uses: u32 sizes, f32 floats, bool expert_weights_norm, an i32
// array for attention.head_count_kv (1 = MLA, 0 = KDA).
#pragma once

#include "absl/status/status.h"
#include "worker/gguf/gguf_writer.h"
#include "worker/model/k3_config.h"
#include "worker/synth/tiktoken_vocab.h"

namespace k3::synth {

// vocab nullptr: tokenizer.ggml.model "no_vocab" (vocab_size says the size). Otherwise the
// "gpt2" tokenizer keys, whose token count must equal config.vocab.
absl::Status SetK3Metadata(const model::K3Config& config, const GgufVocab* vocab, gguf::GgufWriter& w);

}  // namespace k3::synth
