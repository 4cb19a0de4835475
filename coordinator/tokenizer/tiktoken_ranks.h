// tiktoken token bytes by rank -> a GGUF-form vocabulary (for tests; the server reads GGUF). The
// rank files themselves: k3::ParseTiktokenRanks / ReadTiktokenRanksFile in
// worker/common/tiktoken_ranks.h (shared with the model generator).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/vocab.h"

namespace k3::tok {

// Mergeable tokens (type normal, strings through the byte->unicode map) at ids 0..n-1, special
// tokens (type control, literal text) at their ids (>= n), "[PAD<id>]" (type unused) in any gap.
absl::StatusOr<VocabSpec> VocabFromTiktoken(
    const std::vector<std::string>& ranked_bytes,
    const std::vector<std::pair<std::string, int32_t>>& specials, std::string pre);

}  // namespace k3::tok
