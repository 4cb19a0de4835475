#include "coordinator/tokenizer/detokenizer.h"

#include "coordinator/tokenizer/utf8.h"
#include "worker/common/status_macros.h"

namespace k3::tok {

absl::StatusOr<std::string> IncrementalDetokenizer::Feed(int32_t id) {
  K3_ASSIGN_OR_RETURN(const std::string_view bytes, tokenizer_->TokenBytes(id));
  if (!include_special_ && tokenizer_->IsSpecial(id)) return std::string();
  pending_ += bytes;
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const Utf8Step step = DecodeUtf8Step(std::string_view(pending_).substr(i));
    if (step.kind == Utf8Step::Kind::kIncomplete) break;  // may complete with the next token
    if (step.kind == Utf8Step::Kind::kValid) {
      out.append(pending_, i, step.len);
    } else {
      out.append(kReplacementChar);
    }
    i += step.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDetokenizer::Finish() {
  std::string out = pending_.empty() ? std::string() : std::string(kReplacementChar);
  pending_.clear();
  return out;
}

}  // namespace k3::tok
