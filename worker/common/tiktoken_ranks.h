// tiktoken rank files -> token bytes by rank: the one parser of the model generator
// (worker/synth, a real vocabulary for a synthetic model) and the tokenizer's tests
// (coordinator/tokenizer). Here, not in the tokenizer, because the worker builds without the
// coordinator.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace k3 {

// Token bytes indexed by rank; ranks must be exactly 0..n-1. Two line forms, mixable:
//   "<base64 token> <rank>"           .tiktoken files (OpenAI's; Kimi's tiktoken.model)
//   "! <first rank> <b64> <b64> ..."  the npm tiktoken package's `bpe_ranks` (consecutive ranks)
// and that package's encoders/*.json whole (its "bpe_ranks" string). Blank lines (spaces, tabs,
// a trailing CR) are skipped. Errors name the line.
absl::StatusOr<std::vector<std::string>> ParseTiktokenRanks(std::string_view contents);

// The same, from a file of at most 256 MiB (errors name the path).
absl::StatusOr<std::vector<std::string>> ReadTiktokenRanksFile(const std::string& path);

}  // namespace k3
