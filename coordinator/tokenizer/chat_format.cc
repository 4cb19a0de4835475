#include "coordinator/tokenizer/chat_format.h"

#include <string_view>

#include "absl/strings/str_format.h"
#include "worker/common/status_macros.h"

namespace k3::tok {
namespace {

constexpr std::string_view kMiddle = "<|im_middle|>";
constexpr std::string_view kEnd = "<|im_end|>";

absl::Status CheckRole(std::string_view role) {
  if (role == "system" || role == "user" || role == "assistant") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "chat message role \"%s\" is not one of system, user, assistant", role));
}

std::string OpenMarker(std::string_view role) {
  std::string out = "<|im_";
  out += role;
  out += "|>";
  return out;
}

absl::StatusOr<int32_t> SpecialId(const Tokenizer& tokenizer, std::string_view text) {
  const auto id = tokenizer.SpecialTokenId(text);
  if (!id) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the vocabulary has no special token %s for the Kimi chat format", text));
  }
  return *id;
}

// Appends <|im_{role}|>{role}<|im_middle|> as ids.
absl::Status AppendHeader(const Tokenizer& tokenizer, std::string_view role,
                          std::vector<int32_t>* ids) {
  K3_ASSIGN_OR_RETURN(const int32_t open, SpecialId(tokenizer, OpenMarker(role)));
  K3_ASSIGN_OR_RETURN(const int32_t middle, SpecialId(tokenizer, kMiddle));
  K3_ASSIGN_OR_RETURN(const std::vector<int32_t> role_ids, tokenizer.Encode(role, false));
  ids->push_back(open);
  ids->insert(ids->end(), role_ids.begin(), role_ids.end());
  ids->push_back(middle);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> RenderKimiChat(std::span<const ChatMessage> messages,
                                           bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    K3_RETURN_IF_ERROR(CheckRole(m.role));
    out += OpenMarker(m.role);
    out += m.role;
    out += kMiddle;
    out += m.content;
    out += kEnd;
  }
  if (add_generation_prompt) {
    out += OpenMarker("assistant");
    out += "assistant";
    out += kMiddle;
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> EncodeKimiChat(const Tokenizer& tokenizer,
                                                    std::span<const ChatMessage> messages,
                                                    bool add_generation_prompt,
                                                    bool specials_in_content) {
  K3_ASSIGN_OR_RETURN(const int32_t end, SpecialId(tokenizer, kEnd));
  std::vector<int32_t> ids;
  for (const ChatMessage& m : messages) {
    K3_RETURN_IF_ERROR(CheckRole(m.role));
    K3_RETURN_IF_ERROR(AppendHeader(tokenizer, m.role, &ids));
    K3_ASSIGN_OR_RETURN(const std::vector<int32_t> content,
                        tokenizer.Encode(m.content, specials_in_content));
    ids.insert(ids.end(), content.begin(), content.end());
    ids.push_back(end);
  }
  if (add_generation_prompt) K3_RETURN_IF_ERROR(AppendHeader(tokenizer, "assistant", &ids));
  return ids;
}

}  // namespace k3::tok
