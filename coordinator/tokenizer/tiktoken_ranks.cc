#include "coordinator/tokenizer/tiktoken_ranks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/tokenizer/byte_unicode.h"

namespace k3::tok {

absl::StatusOr<VocabSpec> VocabFromTiktoken(
    const std::vector<std::string>& ranked_bytes,
    const std::vector<std::pair<std::string, int32_t>>& specials, std::string pre) {
  const size_t n = ranked_bytes.size();
  size_t size = n;
  for (const auto& [text, id] : specials) {
    if (id < 0 || static_cast<size_t>(id) < n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "special token \"%s\" has id %d, inside the %d mergeable ranks", text, id, n));
    }
    size = std::max(size, static_cast<size_t>(id) + 1);
  }
  VocabSpec spec;
  spec.pre = std::move(pre);
  spec.tokens.resize(size);
  spec.token_types.assign(size, static_cast<int32_t>(TokenType::kUnused));
  for (size_t r = 0; r < n; ++r) {
    spec.tokens[r] = BytesToGgufToken(ranked_bytes[r]);
    spec.token_types[r] = static_cast<int32_t>(TokenType::kNormal);
  }
  std::vector<bool> taken(size, false);
  for (const auto& [text, id] : specials) {
    if (taken[id]) return absl::InvalidArgumentError(absl::StrCat("two special tokens with id ", id));
    taken[id] = true;
    spec.tokens[id] = text;
    spec.token_types[id] = static_cast<int32_t>(TokenType::kControl);
  }
  for (size_t id = n; id < size; ++id) {
    if (!taken[id]) spec.tokens[id] = absl::StrCat("[PAD", id, "]");
  }
  return spec;
}

}  // namespace k3::tok
