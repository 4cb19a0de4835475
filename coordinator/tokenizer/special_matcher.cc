#include "coordinator/tokenizer/special_matcher.h"

#include <algorithm>
#include <functional>

#include "worker/common/string_view_compat.h"

namespace k3::tok {

SpecialMatcher::SpecialMatcher(const std::vector<std::pair<std::string, int32_t>>& specials) {
  for (const auto& [text, id] : specials) {
    by_text_.emplace(text, id);
    can_start_[static_cast<uint8_t>(text[0])] = true;
    lengths_.push_back(text.size());
  }
  std::sort(lengths_.begin(), lengths_.end(), std::greater<>());
  lengths_.erase(std::unique(lengths_.begin(), lengths_.end()), lengths_.end());
}

std::optional<SpecialMatcher::Match> SpecialMatcher::Find(std::string_view text,
                                                          size_t from) const {
  if (by_text_.empty()) return std::nullopt;
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!can_start_[static_cast<uint8_t>(text[pos])]) continue;
    for (const size_t len : lengths_) {
      if (len > text.size() - pos) continue;
      const auto it = by_text_.find(AsAbsl(text.substr(pos, len)));
      if (it != by_text_.end()) return Match{pos, len, it->second};
    }
  }
  return std::nullopt;
}

std::optional<int32_t> SpecialMatcher::Lookup(std::string_view text) const {
  const auto it = by_text_.find(AsAbsl(text));
  if (it == by_text_.end()) return std::nullopt;
  return it->second;
}

}  // namespace k3::tok
