// Finds special tokens (control / user-defined texts) literally in input text. At a position
// where several match, the longest wins. Cost: one table probe per byte, plus a hash lookup per
// distinct special length at bytes that can start a special.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace k3::tok {

class SpecialMatcher {
 public:
  struct Match {
    size_t pos;
    size_t len;
    int32_t id;
  };

  SpecialMatcher() = default;
  // Texts must be non-empty and distinct (the tokenizer checks).
  explicit SpecialMatcher(const std::vector<std::pair<std::string, int32_t>>& specials);

  // The first special starting at or after `from`, if any.
  std::optional<Match> Find(std::string_view text, size_t from) const;
  // The id of a special token given its exact text.
  std::optional<int32_t> Lookup(std::string_view text) const;
  bool empty() const { return by_text_.empty(); }

 private:
  absl::flat_hash_map<std::string, int32_t> by_text_;
  std::array<bool, 256> can_start_{};
  std::vector<size_t> lengths_;  // distinct special lengths, longest first
};

}  // namespace k3::tok
