// A real vocabulary for a synthetic model, from a tiktoken rank file, in the GGUF form
// llama.cpp's "gpt2" tokenizer reads: token strings through GPT-2's byte->unicode map in rank
// order, merges recovered from the ranks (as llama.cpp's converter does for tiktoken models),
// then Kimi K2's special tokens at K2's offsets, <|reserved_token_N|> control tokens in the
// gaps and [UNK]/[PAD] last. For n mergeable ranks (K2: n = 163584, vocab 163840):
//   n+0 [BOS]   n+1 [EOS]   n+2 <|im_end|> (= EOS id)   n+3 <|im_user|>   n+4 <|im_assistant|>
//   n+6 <|start_header_id|>   n+7 <|end_header_id|>   n+9 [EOT_ID]   n+10 <|im_system|>
//   n+11..15 <|tool_calls_section_begin|> .. <|tool_call_end|>   n+17 <|im_middle|>
//   vocab-2 [UNK]   vocab-1 [PAD] (= PAD id)
//
// The rank file is read by k3::ReadTiktokenRanksFile (worker/common/tiktoken_ranks.h, shared with
// the tokenizer's tests). coordinator/tokenizer has the byte map too, but the worker builds without
// the coordinator, so this module keeps its own small copy of it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace k3::synth {

struct GgufVocab {
  std::string pre;                   // tokenizer.ggml.pre
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens (vocab size entries)
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type: 1 normal, 3 control
  std::vector<std::string> merges;   // tokenizer.ggml.merges
  int64_t n_ranks = 0;               // mergeable tokens (ids 0..n_ranks-1)
  int64_t bos_id = -1, eos_id = -1, pad_id = -1;
};

// GPT-2's byte->unicode map: the string GGUF stores for a token's bytes (valid UTF-8).
std::string GgufTokenString(std::string_view bytes);

// "A B" merges, one per multi-byte token whose rank-limited BPE splits it in exactly two parts.
std::vector<std::string> MergesFromRanks(const std::vector<std::string>& ranked);

// Mergeable tokens plus the K2 specials and padding up to vocab_size (>= n + 20).
absl::StatusOr<GgufVocab> VocabFromRanks(const std::vector<std::string>& ranked, int64_t vocab_size,
                                         std::string pre);

// The smallest multiple of 256 leaving at least 256 ids after the ranks (K2: 163840).
int64_t DefaultVocabSize(int64_t n_ranks);

// The pre-tokenizer matching a rank file: from its name (cl100k, o200k, kimi), else its size;
// "kimi-k2" when nothing matches.
std::string GuessPreTokenizer(std::string_view path, int64_t n_ranks);

// Reads and converts `path`; vocab_size 0 takes DefaultVocabSize, pre "" takes the guess.
absl::StatusOr<GgufVocab> LoadTiktokenVocab(const std::string& path, int64_t vocab_size, std::string pre);

}  // namespace k3::synth
