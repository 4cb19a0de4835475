// tiktoken rank files -> token bytes by rank -> a GGUF-form vocabulary (for tests and the model
// generator; the server reads GGUF).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/vocab.h"

namespace k3::tok {

// Token bytes indexed by rank; ranks must be exactly 0..n-1. Two line forms, mixable:
//   "<base64 token> <rank>"           .tiktoken files (OpenAI's; Kimi's tiktoken.model)
//   "! <first rank> <b64> <b64> ..."  the npm tiktoken package's encoders/*.json `bpe_ranks`
//                                     (consecutive ranks from the first)
// Empty lines are skipped. Errors name the line.
absl::StatusOr<std::vector<std::string>> ParseTiktokenRanks(std::string_view contents);
// The same, from a file (errors name the path).
absl::StatusOr<std::vector<std::string>> ReadTiktokenRanksFile(const std::string& path);

// Mergeable tokens (type normal, strings through the byte->unicode map) at ids 0..n-1, special
// tokens (type control, literal text) at their ids (>= n), "[PAD<id>]" (type unused) in any gap.
absl::StatusOr<VocabSpec> VocabFromTiktoken(
    const std::vector<std::string>& ranked_bytes,
    const std::vector<std::pair<std::string, int32_t>>& specials, std::string pre);

}  // namespace k3::tok
